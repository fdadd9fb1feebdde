"""How long ``fedpath report`` takes on a suite, and the README's screenshot.

    fedpath demo output_dir=runs                      # the demo suite (about 5 min)
    python benchmarks/bench_report.py runs/demo [--screenshot docs/img/report.png]

Prints the wall time of the whole report and of the page without the model
figures (``--no-figures``), the figures drawn and the file size; with
``--screenshot`` it opens the page in headless Chromium with the browser test's
own code (:mod:`fedpath.report.browser`: every image loads, no console error)
and saves the top of the page as PNG.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from fedpath.report import write_report
from fedpath.report.browser import check_page, screenshot


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("paths", nargs="+", type=Path, help="run or suite directories")
    ap.add_argument("--screenshot", type=Path, help="write the page's top as PNG")
    ap.add_argument("--height", type=int, default=1900, help="screenshot height")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.html"
        t0 = time.perf_counter()
        quick = write_report(args.paths, out, figures=False)
        t_quick = time.perf_counter() - t0
        t0 = time.perf_counter()
        info = write_report(args.paths, out)
        t_full = time.perf_counter() - t0
        n = len(quick.figures)
        print(f"report without model figures: {t_quick:.1f} s ({n} figures)")
        print(
            f"full report: {t_full:.1f} s, {out.stat().st_size / 1e6:.2f} MB, "
            f"figures: {', '.join(info.figures)}"
        )
        for note in info.skipped:
            print(f"  not drawn: {note}")
        if args.screenshot:
            seen = check_page(out)
            bad = [i["alt"] for i in seen["images"] if not i["ok"]]
            print(
                f"Chromium: {len(seen['images'])} images, {len(bad)} not loaded, "
                f"{len(seen['errors'])} console errors, {len(seen['cells'])} table "
                "cells"
            )
            if bad or seen["errors"]:
                raise SystemExit("the page did not render cleanly; no screenshot")
            screenshot(out, args.screenshot, height=args.height)
            print(f"wrote {args.screenshot}")


if __name__ == "__main__":
    main()
