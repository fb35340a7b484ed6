"""The service page over trained checkpoints, in headless Chromium (issue 49) -> bench/results/page_check.json.

    python -m bench.page_check --workspace DIR [--shots docs/service-page]

``--workspace``: a ``dvc repro``'d checkout (``make demo``: models/, index/, metrics/calibration/). The
real ``factrl serve`` runs there as a separate process (its params.yaml, its trained pair, its
calibration), and the page is driven as a user would drive it:

1. "Paris is the capital of France." (the demo corpus says nothing about Paris) must show the
   not-enough-evidence state: the NOT ENOUGH INFO verdict, "not enough evidence in this corpus", the
   failed rules and what was searched;
2. the page's own first example (a claim drawn from the served corpus) must show a verdict with at
   least one verbatim citation and no not-enough-evidence state.

Each step's card text, verdict, citation count and latency go to the result (``checks``: each step's
pass or fail, ``passed`` all of them); the screenshots to ``--shots`` (``trained-1-paris.png``,
``trained-2-example.png``). The tests drive the same page with scripted agents
(tests/service/test_page_not_enough_evidence.py); this is the check on real trained checkpoints,
which CI does not have.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx

from bench._measured import ROOT, Measurement

RESULTS = ROOT / "bench" / "results" / "page_check.json"
SHOTS = ROOT / "docs" / "service-page"


def start_serve(workspace: Path, port: int, log: Path, timeout: float = 600) -> subprocess.Popen:
    """``factrl serve`` in ``workspace`` on loopback ``port``, once its health check answers."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    proc = subprocess.Popen([sys.executable, "-m", "factrl.cli", "serve", "--port", str(port)], cwd=workspace,
                            env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"factrl serve exited with {proc.returncode}; see {log}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(1)
    proc.terminate()
    raise SystemExit(f"factrl serve did not answer /healthz in {timeout:.0f} s; see {log}")


def card_of(page) -> dict:
    """What the first result card shows."""
    card = page.locator("#card-0")
    return {"verdict": card.locator(".verdict").text_content(), "text": " ".join(card.text_content().split()),
            "citations": card.locator(".quote").count(), "nei_shown": card.locator(".nei").count() > 0}


def drive(url: str, shots_dir: Path, timeout_ms: int) -> tuple[dict, dict]:
    """The two steps of the module docstring in headless Chromium; each step's card and checks."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("Chromium not found (make setup installs it)")
    from factrl.service.examples import OUTSIDE_EXAMPLE

    cards, checks = {}, {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        page.set_default_timeout(timeout_ms)
        page.goto(url + "/")
        page.wait_for_selector("#examples li")
        answering = page.locator("#answering").text_content()

        page.fill("#input", OUTSIDE_EXAMPLE)
        page.click("#submit")
        page.wait_for_selector("#card-0 .verdict")
        page.wait_for_function("!document.getElementById('submit').disabled")
        cards["paris"] = card = card_of(page)
        page.screenshot(path=str(shots_dir / "trained-1-paris.png"), full_page=True)
        checks["paris_not_enough_info"] = card["verdict"] == "NOT ENOUGH INFO" and card["nei_shown"]
        checks["paris_says_what_was_searched"] = ("searched:" in card["text"]
                                                  and "not enough evidence in this corpus" in card["text"].lower())

        example = page.locator("#examples li a").first.text_content()
        page.locator("#examples li a").first.click()
        page.click("#submit")
        page.wait_for_selector("#card-0 .verdict")
        page.wait_for_function("!document.getElementById('submit').disabled")
        cards["example"] = card = {"claim": example, **card_of(page)}
        page.screenshot(path=str(shots_dir / "trained-2-example.png"), full_page=True)
        checks["example_verdict"] = card["verdict"] in ("SUPPORTS", "REFUTES") and not card["nei_shown"]
        checks["example_cites"] = card["citations"] >= 1
        browser.close()
    cards["answering"] = " ".join(answering.split())
    return cards, checks


def main(argv: list[str] | None = None) -> dict:
    from factrl.servers import free_port

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workspace", type=Path, required=True, help="a dvc repro'd checkout (make demo)")
    ap.add_argument("--shots", type=Path, default=SHOTS, help="where the screenshots go")
    ap.add_argument("--timeout", type=float, default=600, help="seconds a step may take")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    measured = Measurement()
    workspace = args.workspace.resolve()
    args.shots.mkdir(parents=True, exist_ok=True)
    port = free_port()
    proc = start_serve(workspace, port, workspace / "page_check_serve.log")
    try:
        started = time.monotonic()
        cards, checks = drive(f"http://127.0.0.1:{port}", args.shots, int(args.timeout * 1000))
        seconds = time.monotonic() - started
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    result = {"workspace_commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=workspace, capture_output=True,
                                                 text=True).stdout.strip() or None,
              "cards": cards, "checks": checks, "passed": all(checks.values()), "seconds": round(seconds, 1),
              "screenshots": [str((args.shots / f).relative_to(ROOT)) if args.shots.is_relative_to(ROOT) else f
                              for f in ("trained-1-paris.png", "trained-2-example.png")],
              "commit": measured.git["commit"]}
    measured.write(result, args.out)
    print(json.dumps({k: result[k] for k in ("checks", "passed", "seconds")}, indent=1))
    return result


if __name__ == "__main__":
    main()
