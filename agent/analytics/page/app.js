// The analytics live view: lists calls in progress, and streams one call's events
// (newline-delimited JSON from /analytics/api/calls/{id}/live) onto a timeline and transcript.
"use strict";

const $ = (id) => document.getElementById(id);
const SPEAKERS = ["caller", "agent"];
const state = { token: "", call: null, utterances: [], speaking: {}, startedAt: 0, ended: false, endS: null };

function readToken() {
  const fragment = new URLSearchParams(location.hash.slice(1));
  if (fragment.get("token")) {
    sessionStorage.setItem("analytics-token", fragment.get("token"));
    fragment.delete("token");
    history.replaceState(null, "", location.pathname + location.search + (fragment.toString() ? "#" + fragment : ""));
  }
  return sessionStorage.getItem("analytics-token") || "";
}

function showError(text) {
  $("error").textContent = text;
  $("error").hidden = !text;
}

async function api(path, options = {}) {
  const response = await fetch(path, { ...options, headers: { Authorization: "Bearer " + state.token } });
  if (response.status === 401 || response.status === 404 && path.endsWith("/calls")) {
    $("login").hidden = false;
    throw new Error("the operator token was refused: enter server.api_token");
  }
  if (!response.ok) throw new Error(path + ": " + response.status);
  return response;
}

async function refreshCalls() {
  try {
    const { calls } = await (await api("/analytics/api/calls")).json();
    const list = $("calls");
    list.replaceChildren();
    if (!calls.length) list.innerHTML = '<li class="muted">none</li>';
    for (const call of calls) {
      const item = document.createElement("li");
      const link = document.createElement("a");
      link.href = "?call=" + encodeURIComponent(call.id);
      link.textContent = call.id;
      link.dataset.callId = call.id;
      item.append(link, ` ${call.attributes.call_sid || ""}, ${call.utterances} utterances`);
      list.append(item);
    }
    showError("");
  } catch (error) {
    showError(String(error.message || error));
  }
}

function nowS() {
  if (state.ended && state.endS !== null) return state.endS;
  return Math.max(0, Date.now() / 1000 - state.startedAt);
}

function intervals() {
  // Each speaker's stretches of speech: finals, plus the one in progress (to now).
  const out = { caller: [], agent: [] };
  for (const u of state.utterances) out[u.speaker].push([u.start_s, u.end_s ?? u.start_s]);
  for (const s of SPEAKERS) if (state.speaking[s] != null) out[s].push([state.speaking[s], nowS()]);
  return out;
}

function overlaps(a, b) {
  const out = [];
  for (const [s1, e1] of a) for (const [s2, e2] of b) {
    const s = Math.max(s1, s2), e = Math.min(e1, e2);
    if (e > s) out.push([s, e]);
  }
  return out;
}

function silences(all, end) {
  const sorted = [...all].sort((x, y) => x[0] - y[0]);
  const out = [];
  let cursor = 0;
  for (const [s, e] of sorted) {
    if (s - cursor > 0.3) out.push([cursor, s]);
    cursor = Math.max(cursor, e);
  }
  if (end - cursor > 0.3) out.push([cursor, end]);
  return out;
}

function drawTimeline() {
  const svg = $("timeline");
  const width = svg.clientWidth || 800;
  const span = Math.max(10, nowS());
  const x = (t) => 60 + (t / span) * (width - 70);
  const lanes = { caller: 12, agent: 52 };
  const parts = [];
  const iv = intervals();
  for (const [s, e] of silences([...iv.caller, ...iv.agent], nowS()))
    parts.push(`<rect class="silence" x="${x(s)}" y="8" width="${Math.max(1, x(e) - x(s))}" height="76" fill="#e5e7eb"><title>silence ${(e - s).toFixed(1)} s</title></rect>`);
  for (const speaker of SPEAKERS) {
    parts.push(`<text x="4" y="${lanes[speaker] + 20}" font-size="12" fill="#374151">${speaker}</text>`);
    for (const [s, e] of iv[speaker])
      parts.push(`<rect class="speech ${speaker}" x="${x(s)}" y="${lanes[speaker]}" width="${Math.max(2, x(e) - x(s))}" height="28" rx="4" fill="${speaker === "caller" ? "#2563eb" : "#15803d"}"></rect>`);
  }
  for (const [s, e] of overlaps(iv.caller, iv.agent))
    parts.push(`<rect class="overlap" x="${x(s)}" y="8" width="${Math.max(2, x(e) - x(s))}" height="76" fill="#dc2626" opacity="0.35"><title>overlap ${(e - s).toFixed(1)} s</title></rect>`);
  for (let t = 0; t <= span; t += span > 60 ? 10 : 2)
    parts.push(`<text x="${x(t)}" y="110" font-size="10" fill="#6b7280" text-anchor="middle">${t}s</text>`);
  svg.innerHTML = parts.join("");
}

function renderTranscript() {
  const list = $("transcript");
  list.replaceChildren();
  for (const u of [...state.utterances].sort((a, b) => a.start_s - b.start_s)) {
    const item = document.createElement("li");
    item.className = u.speaker;
    item.dataset.speaker = u.speaker;
    const when = document.createElement("span");
    when.className = "when";
    when.textContent = `${u.start_s.toFixed(1)}–${(u.end_s ?? u.start_s).toFixed(1)} s ${u.speaker}`;
    const text = document.createElement("span");
    text.className = "text";
    text.textContent = u.text;
    item.append(when, text);
    list.append(item);
  }
}

function showAnalysis(analysis) {
  if (!analysis || analysis.error) return;
  $("analysis").hidden = false;
  $("reason").textContent = analysis.reason;
  $("summary").textContent = analysis.summary;
  $("sentiment-caller").textContent = analysis.sentiment.caller;
  $("sentiment-agent").textContent = analysis.sentiment.agent;
  $("model").textContent = analysis.model;
  $("prompt-version").textContent = analysis.prompt_version;
}

function apply(event) {
  if (event.type === "snapshot") {
    state.utterances = event.call.utterances || [];
    state.startedAt = event.stream_started_at;
    state.speaking = event.speaking;
    state.ended = !event.call.active;
    if (state.ended) state.endS = event.call.duration_s;
    for (const s of SPEAKERS) $("interim-" + s).textContent = event.interim[s] || "";
    showAnalysis(event.call.analysis);
  } else if (event.type === "speech") {
    state.speaking[event.speaker] = event.state === "started" ? event.at_s : null;
  } else if (event.type === "interim") {
    $("interim-" + event.speaker).textContent = event.text;
  } else if (event.type === "utterance") {
    state.utterances.push(event);
    $("interim-" + event.speaker).textContent = "";
  } else if (event.type === "ended") {
    state.ended = true;
    state.endS = nowS();
    state.speaking = {};
    refreshCalls();
  } else if (event.type === "analysis") {
    showAnalysis(event.analysis);
  }
  $("call-state").textContent = state.ended ? "ended" : "live";
  document.querySelector(".interims").hidden = state.ended;
  renderTranscript();
  drawTimeline();
}

async function watch(callId) {
  $("call-section").hidden = false;
  $("call-id").textContent = callId;
  try {
    const response = await api(`/analytics/api/calls/${encodeURIComponent(callId)}/live`);
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let newline;
      while ((newline = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + 1);
        if (line.trim()) apply(JSON.parse(line));
      }
    }
  } catch (error) {
    showError(String(error.message || error));
  }
}

function main() {
  state.token = readToken();
  $("login").hidden = Boolean(state.token);
  $("login").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem("analytics-token", $("token").value);
    location.reload();
  });
  refreshCalls();
  setInterval(refreshCalls, 1000);
  setInterval(() => { if (!state.ended && $("call-section").hidden === false) drawTimeline(); }, 250);
  const callId = new URLSearchParams(location.search).get("call");
  if (callId) watch(callId);
}

main();
