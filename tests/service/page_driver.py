"""Drive `factrl serve`'s page as a reviewer would, in headless Chromium (the OS package) through
Playwright, against a `factrl serve` process over real checkpoints and a demo world's BM25 index.

``serve_process(tmp_path, index_dir, checkpoint)`` starts the server (yields its URL);
``review_in_browser(url, claim, text, ...)`` submits a claim, then a text, saves a correction on the
text's second claim, and returns what the page showed next to what the API answered for the same
jobs, so a test can check the page against the engine's results whatever the model wrote.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import yaml

from tests.conftest import CHROMIUM


@contextlib.contextmanager
def serve_process(tmp_path: Path, index_dir: Path, checkpoint: dict, *, base: str | None = None,
                  max_turns: int = 2, max_new_tokens: int = 48, retrieval_mode: str = "bm25",
                  precision: str = "fp32", calibration_dir: Path | None = None, timeout: float = 300,
                  abstain: dict | None = None) -> Iterator[str]:
    """``factrl serve`` as a subprocess on a free loopback port, serving ``checkpoint``
    (``{"name", "reason", "search"}``) over ``index_dir`` (``retrieval_mode``), with the calibration
    maps of ``calibration_dir`` (none by default) and the ``abstain`` section given (its defaults
    otherwise); its base URL once /healthz answers."""
    from factrl.servers import free_port, spawn

    port = free_port()
    params = {"serve": {"port": port, "index": str(index_dir), "retrieval_mode": retrieval_mode, "device": "cpu",
                        "precision": precision, "max_turns": max_turns, "max_new_tokens": max_new_tokens,
                        "batch_size": 4, "max_wait_ms": 50, "checkpoints": [checkpoint],
                        "corrections_db": str(tmp_path / "corrections.sqlite"),
                        "calibration_dir": str(calibration_dir or tmp_path / "calibration")}}
    if base is not None:
        params["model"] = {"base": base}
    if abstain is not None:
        params["abstain"] = abstain
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "factrl.cli", "serve", "--params", str(tmp_path / "params.yaml")]
    with spawn(command, f"{url}/healthz", timeout=timeout, name="factrl serve", log_path=tmp_path / "serve.log"):
        yield url


def _card(page, index: int) -> dict:
    """What card ``index`` shows: verdict text and class, the no-verdict line, citations, trace."""
    card = page.locator(f"#card-{index}")
    verdict = card.locator(".verdict")
    no_verdict = card.locator(".noverdict")
    return {"claim": card.locator("h3").text_content(), "verdict": verdict.text_content(),
            "verdict_class": verdict.get_attribute("class"),
            "no_verdict": no_verdict.text_content() if no_verdict.count() else None,
            "citations_heading": card.locator("h4").text_content(),
            "quotes": card.locator(".quote").all_text_contents(),
            "trace_summary": card.locator("details summary").text_content(),
            "reasoning": card.locator("details pre").text_content()}


def review_in_browser(url: str, claim: str, text: str, text_claims: int, corrected_verdict: str,
                      shots_dir: Path, prefix: str, timeout_s: float) -> dict:
    """Run the page: one ``claim``; a ``text`` of ``text_claims`` claims; a review of the text's second
    claim (``corrected_verdict``, its first cited passage if any, reviewer "Ada Reviewer").

    Returns ``{"claim_job", "text_job"}`` (the API's job snapshots), ``"claim_card"``, ``"text_cards"``
    (:func:`_card` of each), ``"highlights"`` (the classes of the text's highlighted claims, in order),
    ``"saved"`` (the review's status line), ``"passage_id"`` (the settling passage picked, or None),
    ``"export"`` (the corrections export as JSON lines) and ``"shots"`` (screenshot paths)."""
    from playwright.sync_api import sync_playwright

    out: dict = {"shots": []}
    with sync_playwright() as p, httpx.Client(base_url=url, timeout=60) as client:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        page.set_default_timeout(timeout_s * 1000)
        page.goto(url + "/")
        page.wait_for_selector("#checkpoint option", state="attached")

        def shot(name: str) -> None:
            path = shots_dir / f"{prefix}-{name}.png"
            page.screenshot(path=str(path), full_page=True)
            out["shots"].append(path)

        def submit() -> str:
            with page.expect_response(lambda r: r.url.endswith("/v1/verify") and r.request.method == "POST") as answer:
                page.click("#submit")
            return answer.value.json()["job_id"]

        shot("1-empty")
        page.fill("#input", claim)
        claim_job = submit()
        page.wait_for_selector("text=1 / 1 claims done")
        page.wait_for_selector("#card-0 .verdict")
        out["claim_card"] = _card(page, 0)
        page.click("#card-0 details summary")  # open the trace: the screenshot shows it
        shot("2-claim")

        page.check("input[name=kind][value=text]")
        page.fill("#input", text)
        text_job = submit()
        page.wait_for_selector(f"text={text_claims} / {text_claims} claims done")
        page.wait_for_function(f"document.querySelectorAll('#results .card').length === {text_claims}")
        out["text_cards"] = [_card(page, i) for i in range(text_claims)]
        out["highlights"] = [c.get_attribute("class") for c in page.locator("#text .claim").all()]
        shot("3-text")

        card = page.locator("#card-1")
        card.locator("select[name=verdict]").select_option(corrected_verdict)
        passages = [o.get_attribute("value") for o in card.locator("select[name=passage] option").all()]
        out["passage_id"] = next((v for v in passages if v), None)
        if out["passage_id"]:
            card.locator("select[name=passage]").select_option(out["passage_id"])
        card.locator("input[name=reviewer]").fill("Ada Reviewer")
        card.locator("text=Save review").click()
        card.locator(".saved").wait_for()
        out["saved"] = card.locator(".saved").text_content()
        shot("4-corrected")
        browser.close()
        out["claim_job"] = client.get(f"/v1/jobs/{claim_job}").json()
        out["text_job"] = client.get(f"/v1/jobs/{text_job}").json()
        out["export"] = client.get("/v1/corrections/export", params={"format": "jsonl"}).text
    return out
