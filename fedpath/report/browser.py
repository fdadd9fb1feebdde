"""Open a report in headless Chromium: check that it renders, take a screenshot.

Used by the browser test and to make the README's screenshot (so the picture is
what the test saw). No DevTools protocol: a small script is put in front of the
page's own content in a copy of the file; it records script errors and
``console.error`` calls from the first moment, and on load writes what it found
(images, whether each decoded, the errors, every table cell's value) into the
DOM, which ``chromium --dump-dom`` prints.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

#: names Debian, Ubuntu and others give the browser
NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

_PROBE = """<script>
window.__fp = {errors: []};
window.addEventListener('error', function (e) {
  window.__fp.errors.push(String(e.message || e.type));
}, true);
(function () {
  var orig = console.error;
  console.error = function () {
    window.__fp.errors.push(Array.prototype.join.call(arguments, ' '));
    if (orig) { orig.apply(console, arguments); }
  };
})();
window.addEventListener('load', function () {
  var imgs = Array.prototype.map.call(document.images, function (im) {
    return {alt: im.alt, ok: im.complete && im.naturalWidth > 0,
            w: im.naturalWidth, h: im.naturalHeight};
  });
  var cells = Array.prototype.map.call(
    document.querySelectorAll('td[data-mean]'), function (td) {
      return {table: td.closest('table').getAttribute('data-metric'),
              method: td.getAttribute('data-method'),
              column: td.getAttribute('data-column'),
              mean: parseFloat(td.getAttribute('data-mean'))};
    });
  var out = document.createElement('pre');
  out.id = 'fedpath-probe';
  out.textContent = JSON.stringify({images: imgs, errors: window.__fp.errors,
                                    cells: cells});
  document.body.appendChild(out);
});
</script>"""

_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]


def find_chromium() -> str | None:
    for name in NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def _browser() -> str:
    path = find_chromium()
    if path is None:
        raise FileNotFoundError(
            "no Chromium found (looked for " + ", ".join(NAMES) + "); on Debian: "
            "apt-get install chromium"
        )
    return path


def check_page(html: Path, timeout: float = 60.0) -> dict[str, Any]:
    """What the page showed in Chromium: ``images`` (alt, ok, w, h), ``errors``
    (script errors and console errors) and ``cells`` (every table value)."""
    text = html.read_text(encoding="utf-8")
    probed = html.with_name(f".{html.stem}.probe.html")
    head = re.search(r"<head[^>]*>", text)
    at = head.end() if head else 0
    probed.write_text(text[:at] + _PROBE + text[at:], encoding="utf-8")
    try:
        res = subprocess.run(
            [
                _browser(),
                *_FLAGS,
                "--virtual-time-budget=10000",
                "--dump-dom",
                probed.resolve().as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    finally:
        probed.unlink(missing_ok=True)
    found = re.search(r'<pre id="fedpath-probe">(.*?)</pre>', res.stdout, re.S)
    if found is None:
        raise RuntimeError(
            f"Chromium did not finish loading {html} (exit {res.returncode}): "
            f"{res.stderr[-500:]}"
        )
    import html as html_mod

    return dict(json.loads(html_mod.unescape(found.group(1))))


def screenshot(
    html: Path, png: Path, width: int = 1280, height: int = 2200, timeout: float = 60.0
) -> Path:
    """A PNG of the top ``height`` pixels of the page as Chromium draws it."""
    png.parent.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(
        [
            _browser(),
            *_FLAGS,
            f"--window-size={width},{height}",
            f"--screenshot={png.resolve()}",
            html.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if not png.is_file():
        raise RuntimeError(f"Chromium wrote no screenshot: {res.stderr[-500:]}")
    return png
