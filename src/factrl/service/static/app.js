// factrl serve's page: submit, poll the job, render the text with its claims highlighted by verdict,
// one card per claim (verdict, confidence, citations in their passages, trace), and the review form.
"use strict";

const $ = (id) => document.getElementById(id);
const LABELS = ["SUPPORTS", "REFUTES", "NOT ENOUGH INFO"];

function headers() {
  const h = { "Content-Type": "application/json" };
  const token = $("token").value.trim();
  if (token) h["Authorization"] = "Bearer " + token;
  return h;
}

async function api(path, options = {}) {
  const response = await fetch(path, { ...options, headers: headers() });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(`${response.status}: ${body.detail || response.statusText}`);
  return body;
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c ?? "")));
  return node;
}

function verdictClass(result) {
  if (!result) return "pending";
  if (result.status === "failed") return "failed";
  return result.verdict || "none";
}

function renderText(job) {
  const box = $("text");
  box.replaceChildren();
  if (!job.text) return;
  const byIndex = Object.fromEntries(job.results.map((r) => [r.index, r]));
  let at = 0;
  const p = el("p");
  for (const c of job.claims) {
    p.append(job.text.slice(at, c.start));
    const r = byIndex[c.index];
    const label = r ? `${r.verdict || r.status}${r.confidence != null ? " " + r.confidence.toFixed(2) : ""}` : "pending";
    const span = el("span", { class: "claim " + verdictClass(r), title: label, "data-index": c.index },
                    job.text.slice(c.start, c.end));
    span.onclick = () => document.getElementById("card-" + c.index)?.scrollIntoView({ behavior: "smooth" });
    p.append(span);
    at = c.end;
  }
  p.append(job.text.slice(at));
  box.append(p);
}

function passageWithQuote(c) {
  if (!c.passage_text) return el("div", { class: "passage" }, el("span", { class: "quote" }, c.quote));
  return el("div", { class: "passage" }, c.passage_text.slice(0, c.start),
            el("span", { class: "quote" }, c.passage_text.slice(c.start, c.end)), c.passage_text.slice(c.end));
}

function reviewForm(jobId, r) {
  const form = el("div", { class: "row" });
  const select = el("select", { name: "verdict" });
  for (const label of LABELS) {
    const option = el("option", { value: label }, label);
    if (label === r.verdict) option.selected = true;
    select.append(option);
  }
  const passage = el("select", { name: "passage" }, el("option", { value: "" }, "(no settling passage)"));
  for (const c of r.citations) passage.append(el("option", { value: c.passage_id }, `${c.passage_id} ${c.title || ""}`));
  const reviewer = el("input", { name: "reviewer", placeholder: "reviewer name", size: 14 });
  reviewer.value = localStorage.getItem("factrl-reviewer") || "";
  const status = el("span", { class: "meta" });
  const save = el("button", {}, "Save review");
  save.onclick = async () => {
    localStorage.setItem("factrl-reviewer", reviewer.value);
    try {
      const stored = await api("/v1/corrections", { method: "POST", body: JSON.stringify({
        job_id: jobId, index: r.index, corrected_verdict: select.value, reviewer: reviewer.value,
        passage_id: passage.value || null }) });
      status.className = "saved";
      status.textContent = `saved #${stored.id} (${stored.accepted ? "accepted" : "corrected"})`;
    } catch (err) { status.className = "meta"; status.textContent = err.message; }
  };
  form.append("review:", select, passage, reviewer, save, status);
  return form;
}

function renderCard(jobId, r) {
  const card = el("div", { class: "card", id: "card-" + r.index });
  card.append(el("h3", {}, r.claim));
  if (r.status === "failed") {
    card.append(el("div", { class: "meta" }, "failed: " + r.error));
    return card;
  }
  const confidence = r.confidence == null ? "n/a" : r.confidence.toFixed(2);
  card.append(el("div", {}, el("span", { class: "verdict " + verdictClass(r) }, r.verdict || "no verdict"),
                 ` confidence ${confidence}${r.calibrated ? " (calibrated)" : " (raw, uncalibrated)"}`));
  if (!r.verdict) {
    // a model that wrote no valid verdict (an untrained or tiny checkpoint): say why, from the trace
    const why = r.trace.format_error || "the reasoning agent gave no answer";
    card.append(el("div", { class: "meta noverdict" }, `no verdict: ${why}` +
                   (r.trace.finish_reason === "length" ? " (stopped at the token limit)" : "")));
  }
  const u = r.usage || {};
  card.append(el("div", { class: "meta" },
    `${u.model_calls} model calls, ${u.tokens_in} tokens in / ${u.tokens_out} out${u.estimated ? " (estimated)" : ""}, ` +
    `cost ${r.cost_usd == null ? "unknown" : "$" + r.cost_usd.toFixed(6)}, latency ${r.latency_s}s, batch of ${r.batch_size}`));
  card.append(el("h4", {}, `Citations (${r.citations.length})`));
  for (const c of r.citations) {
    card.append(el("div", {}, el("b", {}, c.title || c.passage_id), ` [${c.passage_id}] chars ${c.start}-${c.end}`,
                   el("span", { class: "meta" }, ` for: ${c.question}`)));
    card.append(passageWithQuote(c));
  }
  const trace = el("details", {}, el("summary", {}, `Trace: ${r.trace.questions.length} questions`));
  for (const q of r.trace.questions) {
    trace.append(el("div", {}, el("b", {}, "Q: "), q.question));
    trace.append(el("div", { class: "meta" }, "searches: " + q.searches.join(" | ") +
                    " ; found: " + q.retrieved.map((h) => h.title || h.id).join(", ")));
    trace.append(el("div", {}, el("b", {}, "report: "), q.report || "(none; passages passed on)"));
  }
  trace.append(el("pre", {}, r.trace.reasoning));
  card.append(trace, reviewForm(jobId, r));
  return card;
}

async function poll(jobId) {
  const job = await api(`/v1/jobs/${jobId}`);
  $("progress").textContent = `${job.done} / ${job.total} claims done${job.failed ? `, ${job.failed} failed` : ""}`;
  renderText(job);
  const results = $("results");
  for (const r of job.results) {
    if (!document.getElementById("card-" + r.index)) results.append(renderCard(jobId, r));
  }
  if (job.status !== "done") setTimeout(() => poll(jobId).catch(showError), 500);
}

function showError(err) { $("progress").textContent = err.message; }

async function submit() {
  const kind = document.querySelector("input[name=kind]:checked").value;
  $("results").replaceChildren();
  $("text").replaceChildren();
  try {
    const job = await api("/v1/verify", { method: "POST", body: JSON.stringify({
      [kind]: $("input").value, checkpoint: $("checkpoint").value || null }) });
    $("progress").textContent = `job ${job.job_id}: ${job.total} claims queued`;
    await poll(job.job_id);
  } catch (err) { showError(err); }
}

$("submit").onclick = submit;

// A link can carry the check to run: #claim=... or #text=... (URL-encoded) fills the form and
// submits it, so a verdict page can be shared or opened from another tool.
function fromLink() {
  const args = new URLSearchParams(location.hash.slice(1));
  for (const kind of ["claim", "text"]) {
    if (!args.get(kind)) continue;
    document.querySelector(`input[name=kind][value=${kind}]`).checked = true;
    $("input").value = args.get(kind);
    submit();
    return;
  }
}

$("token").value = sessionStorage.getItem("factrl-token") || "";
$("token").onchange = () => sessionStorage.setItem("factrl-token", $("token").value);
fetch("/healthz").then((r) => r.json()).then((h) => {
  for (const name of h.checkpoints) $("checkpoint").append(el("option", { value: name }, name));
}).finally(fromLink);
