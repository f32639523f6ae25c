// arenum serve: the password meter and the sequence explorer. Plain JavaScript, no build step,
// nothing loaded from elsewhere. Passwords go to this server in POST bodies only.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { seq: 0, curve: null, last: null, start: 0, page: 20, indexed: 0, highlight: null, treeSeq: 0, constraint: null };

function fmtInt(n) {
  if (n === null || n === undefined) return "?";
  if (!isFinite(n)) return "unbounded";
  if (Math.abs(n) < 1e15) return Math.round(n).toLocaleString("en-US");
  return Number(n).toExponential(3);
}
function fmtNum(x, d) { return (x === null || x === undefined) ? "?" : Number(x).toFixed(d); }
function fmtP(p) { return p >= 1e-4 ? p.toPrecision(4) : p.toExponential(3); }
function fmtTime(s) {
  if (!isFinite(s)) return "forever";
  const units = [["years", 365.25 * 86400], ["days", 86400], ["hours", 3600], ["minutes", 60], ["seconds", 1]];
  if (s < 1) return "less than a second";
  for (const [name, u] of units) {
    if (s >= u) {
      const v = s / u;
      if (name === "years" && v >= 1e6) return v.toExponential(2) + " years";
      return (v < 10 ? v.toFixed(1) : Math.round(v).toLocaleString("en-US")) + " " + name;
    }
  }
  return s.toFixed(1) + " seconds";
}

async function api(path, body) {
  const opts = body === undefined ? {} : { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
  const r = await fetch(path, opts);
  let doc = null;
  try { doc = await r.json(); } catch (e) { doc = { error: "the server sent no JSON (status " + r.status + ")" }; }
  if (!r.ok) throw new Error(doc && doc.error ? doc.error : "status " + r.status);
  return doc;
}

// ------------------------------------------------------------------------------------- the meter
function regimeWords(d) {
  if (d.exact) return "exact: the true guess number";
  if (d.confidence !== undefined && d.confidence !== null)
    return "estimate (" + d.method + ") with a " + Math.round(d.confidence * 100) + "% interval";
  if (d.method === "certified") return "certified bracket: the true guess number lies inside it";
  return "certified bracket (past the server's exact index): the true guess number lies inside it";
}

function verdict(d) {
  const g = fmtInt(d.guess_number), lo = fmtInt(d.rank_lo + 1), hi = fmtInt(d.rank_hi + 1);
  if (d.exact) return "Exact: guess number " + g + ". A guesser who tries this model's most likely passwords first finds it on attempt " + g + ".";
  if (d.confidence !== undefined && d.confidence !== null)
    return "Estimate: about " + g + " guesses (" + Math.round(d.confidence * 100) + "% interval " + lo + " to " + hi + ").";
  return "Certified: between " + lo + " and " + hi + " guesses.";
}

function clearResult(msg) {
  const res = $("result");
  res.dataset.state = "empty";
  delete res.dataset.method; delete res.dataset.rank; delete res.dataset.rankLo; delete res.dataset.rankHi;
  $("verdict").textContent = msg;
  for (const id of ["guess-number", "regime", "bits", "probability", "cumulative", "time"]) $(id).textContent = "\u2013";
  $("steps").replaceChildren();
  $("neighbours-btn").disabled = true;
  state.last = null;
  drawCurve();
}

function showTime() {
  const d = state.last;
  if (!d) return;
  const rate = Number($("rate").value);
  if (d.exact) $("time").textContent = fmtTime(d.guess_number / rate);
  else $("time").textContent = fmtTime((d.rank_lo + 1) / rate) + " to " + fmtTime((d.rank_hi + 1) / rate);
}

function render(d) {
  const res = $("result");
  $("error").hidden = true;
  if (d.error) { clearResult((state.constraint && d.error.indexOf("constraint") >= 0 ? "Not counted under the constraint " + state.constraint + ": " : "The model cannot produce it: ") + d.error); $("error").hidden = false; $("error").textContent = d.error; return; }
  state.last = d;
  res.dataset.state = "ranked";
  res.dataset.method = d.method;
  res.dataset.rank = String(d.rank);
  res.dataset.rankLo = String(d.rank_lo);
  res.dataset.rankHi = String(d.rank_hi);
  res.dataset.bits = String(d.bits);
  $("verdict").textContent = verdict(d);
  $("guess-number").textContent = d.exact ? fmtInt(d.guess_number) : fmtInt(d.rank_lo + 1) + " to " + fmtInt(d.rank_hi + 1);
  $("regime").textContent = regimeWords(d) + " [" + d.method + "]";
  $("bits").textContent = fmtNum(d.bits, 3) + " bits";
  $("probability").textContent = fmtP(d.probability);
  $("cumulative").textContent = d.exact ? fmtNum(d.cumulative, 6) : fmtNum(d.cumulative_lo, 4) + " to " + fmtNum(d.cumulative_hi, 4);
  showTime();
  const steps = $("steps");
  steps.replaceChildren();
  for (const s of d.steps || []) {
    const el = document.createElement("span");
    el.className = "step";
    const light = Math.min(1, s.bits / 8);  // 0 bits: dark (predictable), 8+ bits: light red (surprising)
    el.style.background = "hsl(" + Math.round(140 - 140 * light) + ", 55%, " + Math.round(25 + 30 * light) + "%)";
    el.dataset.bits = String(s.bits);
    const ch = document.createElement("span"); ch.className = "ch"; ch.textContent = s.text === "" ? "\u23ce" : s.text;
    const b = document.createElement("span"); b.className = "b"; b.textContent = fmtNum(s.bits, 1);
    el.title = (s.text === "" ? "end of the password" : "'" + s.text + "'") + ": p = " + fmtP(Math.exp(s.log_prob));
    el.append(ch, b);
    steps.append(el);
  }
  $("neighbours-btn").disabled = !(d.exact && d.rank < state.indexed);
  drawCurve();
}

let timer = null;
function onType() {
  clearTimeout(timer);
  timer = setTimeout(rankNow, 120);
}
async function rankNow() {
  const pw = $("password").value;
  const seq = ++state.seq;
  if (pw === "") { clearResult("Start typing."); return; }
  $("result").dataset.state = "busy";
  try {
    const out = await api("/api/rank", { strings: [pw] });
    if (seq !== state.seq) return;  // a later keystroke's answer wins
    render(out[0]);
  } catch (e) {
    if (seq !== state.seq) return;
    clearResult("No answer.");
    $("result").dataset.state = "error";
    $("error").hidden = false;
    $("error").textContent = e.message;
  }
}

// -------------------------------------------------------------------------------- the SVG curve
const SVGNS = "http://www.w3.org/2000/svg";
function svgEl(name, attrs, text) {
  const el = document.createElementNS(SVGNS, name);
  for (const k in attrs) el.setAttribute(k, attrs[k]);
  if (text !== undefined) el.textContent = text;
  return el;
}

function drawCurve() {
  const svg = $("curve");
  svg.replaceChildren();
  const c = state.curve;
  if (!c) return;
  const W = 640, H = 300, L = 52, R = 16, T = 14, B = 36;
  let maxG = 1;
  for (const p of c.exact) maxG = Math.max(maxG, p.count);
  for (const p of c.certified) maxG = Math.max(maxG, p.count_hi);
  const d = state.last;
  if (d) maxG = Math.max(maxG, d.rank_hi + 1);
  const xmax = Math.max(1, Math.ceil(Math.log10(maxG)));
  const x = (g) => L + (W - L - R) * Math.log10(Math.max(1, g)) / xmax;
  const y = (m) => T + (H - T - B) * (1 - m);
  for (let e = 0; e <= xmax; e += Math.max(1, Math.ceil(xmax / 10))) {
    svg.append(svgEl("line", { class: "grid", x1: x(10 ** e), x2: x(10 ** e), y1: T, y2: H - B }));
    svg.append(svgEl("text", { class: "label", x: x(10 ** e), y: H - B + 14, "text-anchor": "middle" }, "1e" + e));
  }
  for (let m = 0; m <= 1.0001; m += 0.25) {
    svg.append(svgEl("line", { class: "grid", x1: L, x2: W - R, y1: y(m), y2: y(m) }));
    svg.append(svgEl("text", { class: "label", x: L - 6, y: y(m) + 4, "text-anchor": "end" }, m.toFixed(2)));
  }
  svg.append(svgEl("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }));
  svg.append(svgEl("line", { class: "axis", x1: L, x2: L, y1: T, y2: H - B }));
  svg.append(svgEl("text", { class: "label", x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle" }, "guesses (most likely first)"));
  svg.append(svgEl("text", { class: "label", x: 12, y: (T + H - B) / 2, transform: "rotate(-90 12 " + (T + H - B) / 2 + ")", "text-anchor": "middle" }, "mass guessed"));
  if (c.certified.length) {
    const last = c.exact.length ? c.exact[c.exact.length - 1] : null;
    const top = [], bottom = [];
    if (last) { top.push([x(last.count), y(last.mass_hi)]); bottom.push([x(last.count), y(last.mass_lo)]); }
    for (const p of c.certified) { top.push([x(p.count_lo), y(p.mass_hi)]); bottom.push([x(p.count_hi), y(p.mass_lo)]); }
    const pts = top.concat(bottom.reverse()).map((q) => q[0].toFixed(1) + "," + q[1].toFixed(1)).join(" ");
    svg.append(svgEl("polygon", { class: "cert-band", id: "certified-band", points: pts }));
  }
  if (c.exact.length) {
    const pts = c.exact.map((p) => x(p.count).toFixed(1) + "," + y((p.mass_lo + p.mass_hi) / 2).toFixed(1)).join(" ");
    svg.append(svgEl("polyline", { class: "exact-line", id: "exact-line", points: pts }));
  }
  if (d) {
    if (!d.exact) svg.append(svgEl("line", { class: "mark-range", x1: x(d.rank_lo + 1), x2: x(d.rank_hi + 1), y1: y(d.cumulative_lo), y2: y(d.cumulative_hi) }));
    // the record's own point when it lies strictly inside its bracket, else the bracket's geometric middle
    const inside = d.guess_number > d.rank_lo + 1 && d.guess_number < d.rank_hi + 1;
    const gx = d.exact || inside ? d.guess_number : Math.sqrt((d.rank_lo + 1) * (d.rank_hi + 1));
    svg.append(svgEl("circle", { class: "mark", id: "mark", cx: x(gx), cy: y(d.cumulative), r: 5, "data-guess": String(d.guess_number) }));
  }
}

// ------------------------------------------------------------------------------------ explorer
async function loadPage(start) {
  start = Math.max(0, Math.floor(start));
  $("explorer-error").hidden = true;
  try {
    const doc = await api("/api/slice?start=" + start + "&k=" + state.page);
    state.start = doc.start;
    const body = $("ranks").querySelector("tbody");
    body.replaceChildren();
    for (const it of doc.items) {
      const tr = document.createElement("tr");
      tr.dataset.rank = String(it.rank);
      if (state.highlight === it.rank) tr.className = "here";
      const cells = [fmtInt(it.rank), fmtInt(it.rank + 1), it.sequence, fmtNum(it.log_prob, 4), fmtNum(it.bits, 3), fmtP(it.probability)];
      cells.forEach((v, j) => { const td = document.createElement("td"); td.textContent = v; if (j === 2) td.className = "seq"; tr.append(td); });
      body.append(tr);
    }
    $("prev").disabled = doc.start === 0;
    $("next").disabled = !doc.more;
    $("page-info").textContent = "ranks " + fmtInt(doc.start) + " to " + fmtInt(doc.start + doc.items.length - 1) + " of the " + fmtInt(doc.indexed_sequences) + " held exactly";
  } catch (e) {
    $("explorer-error").hidden = false;
    $("explorer-error").textContent = e.message;
  }
}

async function loadChildren() {
  const prefix = $("prefix").value;
  const seq = ++state.treeSeq;
  $("tree-error").hidden = true;
  try {
    const doc = await api("/api/children", { prefix: prefix, k: 100 });
    if (seq !== state.treeSeq) return;
    $("prefix-info").textContent = prefix === "" ? "the start: the first character's probabilities" :
      "prefix '" + prefix + "': p = " + fmtP(Math.exp(doc.log_prob)) + " (" + fmtNum(doc.bits, 2) + " bits)";
    const body = $("children").querySelector("tbody");
    body.replaceChildren();
    for (const k of doc.children) {
      const tr = document.createElement("tr");
      tr.dataset.text = k.text;
      tr.dataset.end = String(k.end);
      const cells = [k.end ? "(end)" : k.text, fmtP(k.probability), fmtNum(k.bits, 2)];
      cells.forEach((v, j) => { const td = document.createElement("td"); td.textContent = v; if (j === 0) td.className = "seq"; tr.append(td); });
      if (!k.end) tr.addEventListener("click", () => { $("prefix").value = prefix + k.text; loadChildren(); });
      body.append(tr);
    }
  } catch (e) {
    if (seq !== state.treeSeq) return;
    $("tree-error").hidden = false;
    $("tree-error").textContent = e.message;
  }
}

function showTab(name) {
  for (const t of ["meter", "explorer"]) {
    $(t).hidden = t !== name;
    $("tab-" + t).classList.toggle("active", t === name);
  }
}

async function init() {
  $("password").addEventListener("input", onType);
  $("show").addEventListener("change", () => { $("password").type = $("show").checked ? "text" : "password"; });
  $("rate").addEventListener("change", showTime);
  $("tab-meter").addEventListener("click", () => showTab("meter"));
  $("tab-explorer").addEventListener("click", () => showTab("explorer"));
  $("prev").addEventListener("click", () => loadPage(state.start - state.page));
  $("next").addEventListener("click", () => loadPage(state.start + state.page));
  $("go").addEventListener("click", () => { state.highlight = Number($("jump").value); loadPage(state.highlight); });
  $("jump").addEventListener("keydown", (e) => { if (e.key === "Enter") $("go").click(); });
  $("neighbours-btn").addEventListener("click", () => {
    const d = state.last;
    state.highlight = d.rank;
    $("jump").value = String(d.rank);
    showTab("explorer");
    loadPage(d.rank - Math.floor(state.page / 2));
  });
  let tt = null;
  $("prefix").addEventListener("input", () => { clearTimeout(tt); tt = setTimeout(loadChildren, 120); });
  $("up").addEventListener("click", () => { $("prefix").value = Array.from($("prefix").value).slice(0, -1).join(""); loadChildren(); });
  try {
    const info = await api("/api/info");
    state.indexed = info.indexed_sequences;
    $("model-line").textContent = info.model.split("/").pop() + " (" + info.support + "): " + fmtInt(info.indexed_sequences) +
      " sequences held exactly (to " + fmtNum(info.built_bits, 1) + " bits)" +
      (info.certified_bits ? ", certified brackets to " + fmtNum(info.certified_bits, 0) + " bits" : "");
    if (info.constraint) {
      state.constraint = info.constraint;
      $("constraint-line").textContent = "Under the constraint " + info.constraint + ": only the sequences it accepts are counted, so every guess number, count and curve is among them.";
      $("constraint-line").hidden = false;
    }
    state.curve = await api("/api/curve?points=40");
    drawCurve();
  } catch (e) {
    $("model-line").textContent = "the server did not answer: " + e.message;
  }
  loadPage(0);
  loadChildren();
  document.body.dataset.ready = "1";
  if ($("password").value) rankNow();
}

document.addEventListener("DOMContentLoaded", init);
