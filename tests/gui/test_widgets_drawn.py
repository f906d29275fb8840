"""Widgets as they are drawn: the drop-down's current item, a disabled main button, the pause sign, the editor's
When field and calendar button, the watched-folder path."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QColor, QFontMetrics, QImage

from .conftest import engine_of, wait_idle


def colors(image: QImage, rect=None) -> set[str]:
    rect = rect or image.rect()
    ratio = image.devicePixelRatio()
    return {QColor(image.pixel(int(x * ratio), int(y * ratio))).name()
            for x in range(rect.left() + 2, rect.right() - 2, 2) for y in range(rect.top() + 2, rect.bottom() - 2, 2)}


def test_a_drop_down_shows_its_current_item_highlighted_with_its_text(qtbot, themed, desktop):
    from desktop import theme

    desktop.window.show()
    desktop.window.show_page("memories")
    combo = desktop.window.memories.findChild(type(desktop.window.memories.project))
    assert combo is not None and combo.count() > 1
    combo.showPopup()
    view = combo.view()
    qtbot.waitUntil(view.isVisible, timeout=5000)
    qtbot.wait(100)
    rect = view.visualRect(view.model().index(combo.currentIndex(), 0))
    seen = colors(view.viewport().grab().toImage(), rect)
    combo.hidePopup()
    highlight = QColor(theme.ACCENT).name()
    assert highlight in seen  # the current item is marked
    assert len(seen) > 3  # and its text is drawn on it (not one flat field)
    # the list opens below the box instead of over it
    assert view.mapToGlobal(view.rect().topLeft()).y() >= combo.mapToGlobal(combo.rect().topLeft()).y() + 4


def test_a_disabled_main_button_does_not_look_enabled(qtbot, themed, desktop):
    from desktop import theme
    from desktop.first_run import RecoveryKeyDialog

    dialog = RecoveryKeyDialog("ABCD-EFGH-IJKL-MNOP-QRST-UVWX-YZ23-4567", parent=desktop.window)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    accent = QColor(theme.ACCENT).name()
    assert not dialog.done_button.isEnabled()
    assert accent not in colors(dialog.done_button.grab().toImage())
    dialog.kept.setChecked(True)
    assert dialog.done_button.isEnabled() and accent in colors(dialog.done_button.grab().toImage())


def test_the_paused_notice_uses_no_character_the_font_lacks(qtbot, desktop):
    status = desktop.window.status
    desktop.bridge.set_paused(True)
    try:
        qtbot.waitUntil(lambda: not status.paused.isHidden(), timeout=5000)
        metrics = QFontMetrics(status.paused.font())
        missing = [c for c in status.paused.text() if not metrics.inFontUcs4(ord(c))]
        assert missing == [], status.paused.text()  # U+23F8 (pause) is drawn as a box with its code
        icon = getattr(status, "paused_icon", None)
        assert icon is not None and not icon.isHidden() and not icon.pixmap().isNull()  # the sign, drawn
    finally:
        desktop.bridge.set_paused(False)


def test_the_editor_shows_an_event_date_as_typed_and_keeps_it(qtbot, desktop):
    eng = engine_of(desktop)
    uid = eng.remember("The boiler was serviced.", kind="episodic", at="2024-05-01", embed="none").id
    browser = desktop.window.memories
    desktop.window.show_page("memories")
    qtbot.waitUntil(lambda: uid in browser.visible_ids(), timeout=10_000)
    browser.select(uid)
    editor = browser.editor
    qtbot.waitUntil(lambda: editor.row is not None and editor.row.id == uid, timeout=5000)
    assert editor.at.text() == "2024-05-01"
    assert editor.changes() == {}  # shown differently, but not a change
    # the calendar button draws an icon that fits it, not a font's emoji
    assert editor.pick_date.text() == "" and not editor.pick_date.icon().isNull()
    assert editor.pick_date.iconSize().width() <= editor.pick_date.sizeHint().width() - 4
    editor.at.setText("2024-05-03 14:30")
    editor.save.click()
    wait_idle(qtbot, desktop)
    qtbot.waitUntil(lambda: eng.get(uid).at is not None and not eng.get(uid).at.startswith("2024-05-01"),
                    timeout=5000)
    from desktop.formatting import editable_when

    assert editable_when(eng.get(uid).at) == "2024-05-03 14:30"


def test_a_watched_folder_path_uses_the_width_it_has(qtbot, desktop, tmp_path: Path):
    box = desktop.window.settings.folders
    folder = tmp_path / "a rather long folder name for the notes" / "and one more level of it"
    folder.mkdir(parents=True)
    desktop.window.resize(1440, 900)
    desktop.window.show()
    desktop.window.show_page("settings")
    box.add_folder(str(folder))
    qtbot.waitUntil(lambda: box.list.topLevelItemCount() == 1, timeout=20_000)
    qtbot.wait(100)
    header = box.list.header()
    needed = QFontMetrics(box.list.font()).horizontalAdvance(str(folder)) + 16
    assert header.sectionSize(0) >= min(needed, box.list.viewport().width() // 2)
    used = sum(header.sectionSize(i) for i in range(header.count()))
    assert used >= box.list.viewport().width() - 2  # no empty column beside a cut path
    assert box.list.topLevelItem(0).toolTip(0) == str(folder)


def test_search_in_memories_offers_the_documents_passages_read_by_ocr(qtbot, desktop, tmp_path: Path):
    from tests.formats_fixtures import make_png

    picture = make_png(tmp_path / "router.png", ["Guest WiFi password", "heron meadow 42"])
    eng = engine_of(desktop)
    assert [r.status for r in eng.ingest([picture])] == ["added"]
    eng.remember("The router sits in the hall cupboard.", embed="none")
    browser = desktop.window.memories
    desktop.window.show_page("memories")
    browser.search.setText("wifi password")
    passages = browser.passages
    qtbot.waitUntil(lambda: passages.isVisibleTo(browser) and passages.list.count() >= 1, timeout=30_000)
    item = passages.list.item(0)
    assert item.text().startswith("router.png · page 1 · OCR") and "heron meadow 42" in item.text().lower()
    passages.list.itemClicked.emit(item)  # read it, in the document, at that passage
    viewer = desktop.window.documents.viewer
    qtbot.waitUntil(lambda: viewer is not None and viewer.isVisible()
                    and "heron meadow 42" in (viewer.highlighted() or "").lower(), timeout=10_000)
    browser.search.setText("")
    qtbot.waitUntil(lambda: not passages.isVisibleTo(browser), timeout=5000)


def test_the_welcome_card_leaves_the_documents_list_its_room(qtbot, qasync_loop, profile_home, lexical_embedder,
                                                           tmp_path: Path):
    from .conftest import make_desktop

    app = make_desktop(qtbot, profile_home, lexical_embedder)
    try:
        window = app.window
        card = window.first_run
        qtbot.waitUntil(lambda: card.isVisible() and "ready" in card.body.text(), timeout=20_000)
        note = tmp_path / "garden.md"
        note.write_text("# Garden\n\nSow the beans in March.", encoding="utf-8")
        engine_of(app).ingest([note])
        window.build_pages()
        docs = window.documents
        for size, rows in (((1080, 700), 3), ((662, 420), 2)):  # the default window, and scale 2 on 1440x900
            window.resize(*size)
            window.show()
            window.show_page("documents")
            qtbot.waitUntil(lambda: docs.list.topLevelItemCount() == 1, timeout=20_000)
            qtbot.wait(150)
            row = docs.list.sizeHintForRow(0) if hasattr(docs.list, "sizeHintForRow") else 24
            assert docs.list.viewport().height() >= rows * row, (size, docs.list.viewport().height(), row)
            assert card.compact and card.details.isVisible()
        card.details.click()  # the whole report, not a three-line scroll box
        qtbot.wait(100)
        assert not card.compact and card.body.height() >= card.body.heightForWidth(card.body.width()) - 2
        assert "Hide details" == card.details.text()
        window.resize(1440, 900)
        card.details.click()
        qtbot.wait(100)
        assert not card.compact and not card.details.isVisible()  # a tall window shows it all anyway
    finally:
        app.quit()
