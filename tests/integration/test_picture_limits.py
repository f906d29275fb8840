"""Pictures that are small on disk and huge once decoded: a 310 KB 6321 x 6321 16-bit RGBA PNG (just under
the pixel limit, 305 MiB decoded) and a PDF whose only page is one 30000 x 30000 FlateDecode image. Each is
refused from its header (the PDF image from its dictionary) before a pixel is decoded, through the CLI
(which reads in place) and through `serve` (whose helper process reads it), and every process involved
stays under the project's 400 MiB bound (tests/integration/test_hostile_files.py). The helper has a memory
limit of its own: a reader that needs more fails its file with a clear message and the next file is read;
a helper that a file left large exits.

Peak RSS is each process's own high-water mark (VmHWM in /proc/PID/status), polled while it runs: it only
grows, so the last value read is the peak up to that moment, however loaded the machine is."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import httpx
import psutil
import pytest

from engine import limits, parse_worker
from engine.parsers import DocumentError, parse_file
from tests.fixtures_docs import make_docx

ROOT = Path(__file__).resolve().parents[2]
RSS_CAP_MIB = 400
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def png(path: Path, side: int, *, bits: int = 16, color_type: int = 6, channels: int = 4) -> Path:
    """A square PNG of zeros, written row by row through zlib (never whole in memory)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row = bytes(1 + side * channels * bits // 8)  # filter byte 0, then the pixels
    z = zlib.compressobj(6)
    body = b"".join(z.compress(row) for _ in range(side)) + z.flush()
    header = struct.pack(">IIBBBBB", side, side, bits, color_type, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", body) + chunk(b"IEND", b""))
    return path


def pdf_with_one_image(path: Path, side: int, color_space: str = "/DeviceGray", channels: int = 1) -> Path:
    """A one-page PDF without text whose page draws one side x side image, a FlateDecode stream of zeros."""
    z = zlib.compressobj(6)
    row = bytes(side * channels)
    data = b"".join(z.compress(row) for _ in range(side)) + z.flush()
    content = b"q 612 0 0 792 0 0 cm /Im0 Do Q"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /XObject << /Im0 5 0 R >> >> "
        b"/Contents 4 0 R >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content),
        b"<< /Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace %s /BitsPerComponent 8 "
        b"/Filter /FlateDecode /Length %d >>\nstream\n%s\nendstream" % (side, side, color_space.encode(), len(data), data),
    ]
    out = bytearray(b"%PDF-1.7\n")
    offsets = []
    for n, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (n, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    path.write_bytes(bytes(out))
    return path


@pytest.fixture(scope="module")
def bombs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("pictures")
    return {"png": png(d / "scan.png", 6321), "pdf": pdf_with_one_image(d / "scan.pdf", 30000)}


EXPECTED = {"png": "scan.png is 6,321 x 6,321 pixels (16-bit, 4 channels): 304.83 MiB once decoded, more than the "
                   "limit of 128 MiB for one picture",
            "pdf": "scan.pdf: an image on page 1 is 30,000 x 30,000 pixels, more than the limit of 40 million"}


def hwm_mib(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return None


class PeakWatch:
    """The peak RSS of a process and of every process it starts, polled."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.root = psutil.Process(proc.pid)
        self.peaks: dict[int, float] = {}
        self.names: dict[int, str] = {}

    def poll(self) -> None:
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        for p in procs:
            if (v := hwm_mib(p.pid)) is not None:
                self.peaks[p.pid] = max(self.peaks.get(p.pid, 0.0), v)
                self.names.setdefault(p.pid, "helper" if p.pid != self.root.pid else "main")

    def report(self) -> str:
        return ", ".join(f"{self.names[p]} {v:.0f} MiB" for p, v in self.peaks.items())


def test_the_pictures_are_small_files_that_declare_huge_ones(bombs: dict[str, Path]):
    assert bombs["png"].stat().st_size < 400_000 and bombs["pdf"].stat().st_size < 1_000_000
    assert 6321 * 6321 < limits.MAX_IMAGE_PIXELS  # under the pixel limit: only the bytes give it away
    for kind, path in bombs.items():
        t0 = time.perf_counter()
        with pytest.raises(DocumentError) as e:
            parse_file(path, max_bytes=50 * 2**20)
        assert str(e.value).startswith(EXPECTED[kind]) and time.perf_counter() - t0 < 10


@pytest.mark.parametrize("kind", ["png", "pdf"])
def test_the_cli_refuses_them_under_the_bound(bombs: dict[str, Path], kind: str):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "engine.cli", "ingest", "--json", str(bombs[kind])],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    watch = PeakWatch(proc)
    while proc.poll() is None:
        watch.poll()
        time.sleep(0.02)
    out, err = proc.communicate()
    print(f"{kind}: {watch.report()}")
    [result] = json.loads(out)
    assert result["status"] == "failed" and result["error"].startswith(EXPECTED[kind]), (out, err[-2000:])
    assert watch.peaks and max(watch.peaks.values()) < RSS_CAP_MIB, watch.report()


def test_serve_and_its_helper_refuse_them_under_the_bound(bombs: dict[str, Path], tmp_path: Path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cli = [sys.executable, "-m", "engine.cli"]
    subprocess.run([*cli, "folders", "allow", str(bombs["png"].parent)], env=env, check=True, capture_output=True)
    token = json.loads(subprocess.run([*cli, "token", "--json"], env=env, check=True, capture_output=True,
                                      text=True).stdout)["token"]
    docx = make_docx(bombs["png"].parent / "plan.docx")  # an office file: also read by the helper
    server = subprocess.Popen([*cli, "serve", "--port", "0", "--json"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, env=env)
    watch = PeakWatch(server)
    try:
        assert server.stdout is not None
        announced = ""
        while not announced.rstrip().endswith("}"):  # {"url": ..., "docs": ...} over a few lines
            line = server.stdout.readline()
            assert line, "serve did not start"
            announced += line
        url = json.loads(announced)["url"]
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=300) as client:
            for kind in ("png", "pdf"):
                pending = _post_watching(client, watch, [str(bombs[kind])])
                [result] = pending.json()
                assert result["status"] == "failed" and result["error"].startswith(EXPECTED[kind]), result
            [result] = _post_watching(client, watch, [str(docx)]).json()
            assert result["status"] == "added", result  # and the helper reads the next file
        print(watch.report())
        assert len(watch.peaks) >= 2, watch.report()  # the server and its helper
        assert max(watch.peaks.values()) < RSS_CAP_MIB, watch.report()
    finally:
        server.terminate()
        server.wait(30)


def _post_watching(client: httpx.Client, watch: PeakWatch, paths: list[str]) -> httpx.Response:
    import threading

    box: list[httpx.Response] = []
    t = threading.Thread(target=lambda: box.append(client.post("/ingest", json={"paths": paths})))
    t.start()
    while t.is_alive():
        watch.poll()
        t.join(0.02)
    watch.poll()
    assert box and box[0].status_code == 200, box[0].text if box else "no answer"
    return box[0]


def test_a_helper_over_its_memory_limit_fails_that_file_and_reads_the_next(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch):
    """A picture within the limits whose reading (OCR) needs more than the helper may have."""
    monkeypatch.setattr(parse_worker, "MEMORY_MIB", 600)  # loading the OCR engine takes ~350 MiB of it
    picture = png(tmp_path / "poster.png", 6000, bits=8, color_type=2, channels=3)  # 103 MiB decoded: allowed
    readers = parse_worker.Readers()
    readers.use_helpers()
    try:
        with pytest.raises(DocumentError, match=r"^poster\.png needs more memory to read than one document may use"):
            readers.parse(picture, max_bytes=50 * 2**20)
        doc = readers.parse(make_docx(tmp_path / "plan.docx"), max_bytes=50 * 2**20)
        assert doc.title == "Household plan"
    finally:
        readers.close()


def test_a_helper_gives_back_what_a_large_picture_took(tmp_path: Path):
    picture = png(tmp_path / "page.png", 2000, bits=8, color_type=2, channels=3)  # OCR takes ~350 MiB more
    readers = parse_worker.Readers()
    readers.use_helpers()
    try:
        with pytest.raises(DocumentError, match="no text"):
            readers.parse(picture, max_bytes=50 * 2**20)
        [helper] = readers._idle
        rss = psutil.Process(helper.proc.pid).memory_info().rss / 2**20
        peak = hwm_mib(helper.proc.pid)
        print(f"helper: peak {peak:.0f} MiB, {rss:.0f} MiB after answering")
        assert peak is not None and peak > parse_worker.RETIRE_MIB and rss < parse_worker.RETIRE_MIB
    finally:
        readers.close()


def test_a_helper_still_large_after_a_file_exits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # below what any helper holds (one that has read an office file holds ~29 MiB, Python alone ~10): each
    # exits after a file
    monkeypatch.setattr(parse_worker, "RETIRE_MIB", 8)
    readers = parse_worker.Readers()
    readers.use_helpers()
    try:
        for n in (1, 2):
            doc = readers.parse(make_docx(tmp_path / f"plan{n}.docx"), max_bytes=50 * 2**20)
            assert doc.title == "Household plan"
            deadline = time.monotonic() + parse_worker.IDLE_SECONDS / 3  # well before an idle helper would exit
            while readers.helpers() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert readers.helpers() == 0 and readers.started == n  # it exited after answering
    finally:
        readers.close()
