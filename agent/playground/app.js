/*
 * Voice agent playground: a plain WebRTC client for the SmallWebRTC server, no CDN, no bundler.
 *
 * Flow: getUserMedia -> RTCPeerConnection (one audio transceiver + a data channel)
 *   -> POST /start (ICE servers, busy check) -> POST /sessions/{id}/api/offer with the SDP
 *   -> remote audio into <audio id="bot-audio">; late ICE candidates go by PATCH.
 *
 * Data channel, client -> server:
 *   "ping" every second (SmallWebRTC's keep-alive: the server ends a call whose pings stop);
 *   {"label":"rtvi-ai","type":"client-ready","id":..,"data":{"version":"2.2.0","about":{..}}}.
 *
 * Data channel, server -> client: Pipecat RTVI messages (label "rtvi-ai"). The page listens to
 *   user-transcription {text, final}   the user's words, interim (grey) then final
 *   bot-output {text, segment_id, spoken_status, output_type}   the bot's reply, by segment
 *   bot-tts-text {text}                the bot's spoken text (used when bot-output is absent)
 *   bot-llm-text {text}                the LLM's streamed tokens (used when neither is present)
 *   vad-user-started/stopped-speaking  the server's VAD hears the user: "You" pill, green meter
 *   bot-started/stopped-speaking       the "Bot" pill
 *   server-message {type: "turn-latency", turn, total_ms, stages_ms}   an answered turn's
 *                                      latency, each stage in ms from the end of the user's
 *                                      speech: drawn as a bar under the bot's reply
 *   server-message {type: "translation", id, source, text, final, source_language,
 *                   target_language}    a translation call (translation.enabled): the
 *                                      translation of the user's utterance `id` so far, drawn
 *                                      as its own bubble under the user's words; once one
 *                                      came, the bot's text bubbles (the same words, spoken)
 *                                      are not drawn, and a turn-latency bar goes under the
 *                                      last translation (end of speech -> its first audio)
 *   server-message {type: "translation-error", id, error}   why utterance `id` was not
 *                                      translated, in its bubble
 *   server-message {type: "interpreter-waiting" | "interpreter-joined" | "interpreter-peer-left",
 *                   party, language, peer, peer_language}   an interpreted session (the page
 *                                      opened as /?interpreter_session=ID&party=agent|caller:
 *                                      both go in the offer's request_data): the status line
 *                                      says whether the other party is there (and keeps
 *                                      saying it: "Connected" does not replace it, nor does
 *                                      "Disconnected" once the other party left); a
 *                                      translation message with another `party` is the other
 *                                      party's words, drawn as its own bubble (what they said,
 *                                      and what you heard in your language); the bot's text
 *                                      (those words and the session's notices, spoken) is
 *                                      not drawn
 *   bot-ready, error, error-response  status line
 *
 * The microphone level meter is measured here, in the page (Web Audio), from the same stream
 * the call sends.
 */
"use strict";

const RTVI_LABEL = "rtvi-ai";
const RTVI_VERSION = "2.2.0";

const $ = (id) => document.getElementById(id);
const ui = {
  button: $("connect"), status: $("status"), transcript: $("transcript"), empty: $("empty"),
  error: $("error"), audio: $("bot-audio"), userPill: $("user-speaking"), botPill: $("bot-speaking"),
  meter: $("mic-level"),
};

// A turn's stages, in the order they happen; the bar shows the time each one added.
const STAGES = [
  ["vad_stop", "VAD", "VAD stop wait: the silence the VAD hears before it decides you stopped"],
  ["stt_final", "STT", "STT: the final transcript, after the VAD stop"],
  ["llm_first_token", "LLM", "LLM: the answer's first token, after the transcript"],
  ["tts_first_audio", "TTS", "TTS: the answer's first audio, after the first token"],
  ["first_audio_out", "out", "Out: the first audio sent to you, after the TTS made it"],
];
const BAR_SCALE_MS = 1000; // a full bar is one second (or the turn, when it took longer)

let session = null; // {pc, dc, stream, pingTimer, pcId, sessionId}
let userBubble = null; // {el, finals: [], interim: ""}
let botBubble = null; // {el, segments: Map, order: [], tts: "", llm: "", latency: null}
let meter = null; // {context, analyser, samples, level, frame}
let translations = null; // a translation call: Map of utterance id -> its bubble
let sessionStatus = null; // an interpreted session: [text, kind] of its status line
let sessionOver = false; // the other party left: the server ends this call, the status says why

function setStatus(text, kind) {
  ui.status.textContent = text;
  ui.status.className = "pill " + kind;
}

function showError(text) { ui.error.textContent = text || ""; }

function setPill(pill, active) { pill.className = "pill " + (active ? "active" : "dim"); }

function addBubble(kind) {
  if (ui.empty) { ui.empty.remove(); ui.empty = null; }
  const el = document.createElement("div");
  el.className = "msg " + kind;
  const who = document.createElement("span");
  who.className = "who";
  who.textContent = kind === "user" ? "You" : kind === "bot" ? "Bot" : kind;
  const body = document.createElement("span");
  body.className = "text";
  const interim = document.createElement("span");
  interim.className = "interim";
  el.append(who, body, interim);
  ui.transcript.append(el);
  ui.transcript.scrollTop = ui.transcript.scrollHeight;
  return el;
}

function renderUser() {
  userBubble.el.querySelector(".text").textContent = userBubble.finals.join(" ");
  userBubble.el.querySelector(".interim").textContent =
    (userBubble.finals.length && userBubble.interim ? " " : "") + userBubble.interim;
  ui.transcript.scrollTop = ui.transcript.scrollHeight;
}

function onUserText(text, final) {
  text = (text || "").trim();
  if (!text) return;
  botBubble = null; // the user speaks: the next bot text starts a new reply
  if (!userBubble) userBubble = { el: addBubble("user"), finals: [], interim: "" };
  if (final) { userBubble.finals.push(text); userBubble.interim = ""; }
  else { userBubble.interim = text; }
  renderUser();
}

function ensureBot() {
  if (!botBubble) {
    botBubble = { el: addBubble("bot"), segments: new Map(), order: [], tts: "", llm: "",
                  latency: null };
    userBubble = null; // the bot answers: the user's next words start a new turn
  }
  return botBubble;
}

function renderBot() {
  const b = botBubble;
  let text = b.order.map((id) => b.segments.get(id)).join(" ");
  if (!text) text = b.tts || b.llm;
  b.el.querySelector(".text").textContent = text.trim();
  ui.transcript.scrollTop = ui.transcript.scrollHeight;
}

function joinText(sofar, piece) {
  if (!sofar) return piece;
  if (/^[\s.,!?;:]/.test(piece) || /\s$/.test(sofar)) return sofar + piece;
  return sofar + " " + piece;
}

function onBotOutput(data) {
  if (!data || !data.text) return;
  if (data.output_type === "word" || data.output_type === "token") return;
  const b = ensureBot();
  const id = data.segment_id != null ? String(data.segment_id) : "s" + b.order.length;
  if (!b.segments.has(id)) b.order.push(id);
  b.segments.set(id, data.text.trim());
  renderBot();
}

// An interpreted session: which party this page is, from its own URL (null: a call of its own).
const INTERPRETER = (() => {
  const q = new URLSearchParams(window.location.search);
  const id = q.get("interpreter_session");
  return id ? { interpreter_session: id, party: q.get("party") || "agent" } : null;
})();

// What the bot says is not drawn as its own bubble in a translation call (once a translation
// came: the same words, spoken) nor in an interpreted session (it speaks the other party's
// words, drawn as their bubble, and the session's notices, which the status line shows).
function botTextShownElsewhere() { return !!(translations || INTERPRETER); }

function translationBubble(id, language, party) {
  if (!translations) translations = new Map();
  const peer = INTERPRETER && party && party !== INTERPRETER.party;
  const key = (peer ? party : "") + ":" + id; // each party's utterances count from 1
  if (!translations.has(key)) {
    const el = addBubble(peer ? "peer" : "translation");
    el.querySelector(".who").textContent = peer ? party : language ? "→ " + language : "→";
    translations.set(key, el);
    if (!peer) userBubble = null; // the next words are the next utterance
  }
  return translations.get(key);
}

function onTranslation(data) {
  const el = translationBubble(data.id, data.target_language, data.party);
  if (el.classList.contains("peer")) {
    el.querySelector(".who").textContent = data.party + " (" + data.source_language + "): "
      + (data.source || "") + " →";
  }
  el.querySelector(".text").textContent = data.text || "";
  el.querySelector(".interim").textContent = data.final ? "" : " …";
  ui.transcript.scrollTop = ui.transcript.scrollHeight;
}

function onTranslationError(data) {
  const el = translationBubble(data.id, "", data.party);
  el.classList.add("failed");
  el.querySelector(".text").textContent = "not translated: " + (data.error || "error");
  el.querySelector(".interim").textContent = "";
}

function onServerMessage(data) {
  if (data.type === "turn-latency") onTurnLatency(data);
  else if (data.type === "translation") onTranslation(data);
  else if (data.type === "translation-error") onTranslationError(data);
  else if (data.type === "interpreter-waiting") {
    setSessionStatus("Waiting for the " + data.peer + " (" + data.peer_language + ")", "connecting");
  } else if (data.type === "interpreter-joined") {
    setSessionStatus("With the " + data.peer + " (" + data.peer_language + ")", "connected");
  } else if (data.type === "interpreter-peer-left") {
    sessionOver = true;
    setSessionStatus("The " + data.peer + " left", "idle");
  }
}

// An interpreted session's state is the status line from its first message on: the call's
// own "Connected" (bot-ready, the connection's state), which may come after it, does not
// replace it, nor does "Disconnected" once the other party has left (the server then ends
// this call).
function setSessionStatus(text, kind) {
  sessionStatus = [text, kind];
  setStatus(text, kind);
}

function showConnected() {
  if (sessionStatus) setStatus(...sessionStatus);
  else setStatus("Connected", "connected");
}

function stageTimes(stagesMs) {
  // Cumulative ms from the end of speech -> the ms each stage added (never negative).
  let reached = 0;
  return STAGES.map(([key, label, title]) => {
    const at = stagesMs[key];
    const ms = typeof at === "number" ? Math.max(0, at - reached) : null;
    if (typeof at === "number") reached = Math.max(reached, at);
    return { key, label, title, ms };
  });
}

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text != null) node.textContent = text;
  return node;
}

function onTurnLatency(data) {
  const total = data.total_ms;
  if (typeof total !== "number") return;
  let host;
  if (translations && translations.size) { // a translation call: under the translation spoken
    host = Array.from(translations.values()).pop();
  } else {
    if (botBubble && botBubble.latency != null && botBubble.latency !== data.turn) botBubble = null;
    const b = ensureBot();
    b.latency = data.turn;
    host = b.el;
  }
  const stages = stageTimes(data.stages_ms || {});
  const box = el("div", "latency");
  box.title = "End of your speech → first audio of the " + (translations ? "translation" : "answer");
  const row = el("div", "latency-row");
  const track = el("span", "bar");
  const scale = Math.max(BAR_SCALE_MS, total);
  for (const s of stages) {
    if (!s.ms) continue;
    const seg = el("span", "seg");
    seg.dataset.stage = s.key;
    seg.style.width = (100 * s.ms / scale).toFixed(2) + "%";
    seg.title = s.title + ": " + s.ms + " ms";
    track.append(seg);
  }
  row.append(track, el("span", "total", total + " ms"));
  const legend = el("div", "stages");
  for (const s of stages) {
    if (s.ms == null) continue;
    const item = el("span", "stage");
    item.dataset.stage = s.key;
    item.title = s.title;
    item.append(el("i"), el("span", "name", s.label), el("span", "ms", String(s.ms)));
    legend.append(item);
  }
  box.append(row, legend);
  const old = host.querySelector(".latency");
  if (old) old.replaceWith(box); else host.append(box);
  ui.transcript.scrollTop = ui.transcript.scrollHeight;
}

function setHeard(heard) {
  setPill(ui.userPill, heard);
  ui.meter.classList.toggle("heard", heard);
}

function showLevel(percent) {
  ui.meter.firstElementChild.style.width = percent.toFixed(1) + "%";
  ui.meter.setAttribute("aria-valuenow", String(Math.round(percent)));
}

function startMeter(stream) {
  const Context = window.AudioContext || window.webkitAudioContext;
  if (!Context) return;
  const context = new Context();
  const analyser = context.createAnalyser();
  analyser.fftSize = 1024;
  context.createMediaStreamSource(stream).connect(analyser);
  if (context.state === "suspended") context.resume().catch(() => {});
  meter = { context, analyser, samples: new Float32Array(analyser.fftSize), level: 0, frame: 0 };
  const tick = () => {
    if (!meter) return;
    meter.analyser.getFloatTimeDomainData(meter.samples);
    let sum = 0;
    for (const v of meter.samples) sum += v * v;
    const rms = Math.sqrt(sum / meter.samples.length);
    // -60 dBFS (quiet room) .. 0 dBFS: fast rise, slow fall, like a VU meter.
    const now = Math.min(100, Math.max(0, (20 * Math.log10(rms + 1e-9) + 60) * (100 / 60)));
    meter.level = Math.max(now, meter.level * 0.9);
    showLevel(meter.level);
    meter.frame = requestAnimationFrame(tick);
  };
  tick();
}

function stopMeter() {
  if (meter) {
    cancelAnimationFrame(meter.frame);
    meter.context.close().catch(() => {});
    meter = null;
  }
  showLevel(0);
  setHeard(false);
}

function handleRtvi(msg) {
  const data = msg.data || {};
  switch (msg.type) {
    case "bot-ready": showConnected(); break;
    case "user-transcription": onUserText(data.text, !!data.final); break;
    case "bot-output": if (!botTextShownElsewhere()) onBotOutput(data); break;
    case "bot-tts-text": if (!botTextShownElsewhere()) { const b = ensureBot(); b.tts = joinText(b.tts, data.text || ""); renderBot(); } break;
    case "bot-llm-text": if (!botTextShownElsewhere()) { const b = ensureBot(); b.llm = joinText(b.llm, data.text || ""); renderBot(); } break;
    case "vad-user-started-speaking": setHeard(true); break;
    case "vad-user-stopped-speaking": setHeard(false); break;
    case "server-message": onServerMessage(data); break;
    case "bot-started-speaking": setPill(ui.botPill, true); break;
    case "bot-stopped-speaking": setPill(ui.botPill, false); break;
    case "error": case "error-response": showError(data.error || data.message || "server error"); break;
    default: break;
  }
}

function onChannelMessage(event) {
  if (typeof event.data !== "string") return;
  let msg;
  try { msg = JSON.parse(event.data); } catch { return; }
  if (msg && msg.label === RTVI_LABEL) handleRtvi(msg);
  else if (msg && msg.type === "signalling" && msg.message && msg.message.type === "peerLeft") {
    disconnect(sessionOver ? "" : "The agent ended the call.");
  }
}

function waitForIce(pc, ms) {
  if (pc.iceGatheringState === "complete") return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => { pc.removeEventListener("icegatheringstatechange", check); resolve(); };
    const check = () => { if (pc.iceGatheringState === "complete") done(); };
    pc.addEventListener("icegatheringstatechange", check);
    setTimeout(done, ms);
  });
}

async function postJson(url, method, body) {
  const res = await fetch(url, {
    method, headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  });
  const payload = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(payload.error || payload.detail || ("HTTP " + res.status));
  return payload;
}

async function connect() {
  showError("");
  translations = null;
  sessionStatus = null;
  sessionOver = false;
  ui.button.disabled = true;
  setStatus("Connecting…", "connecting");
  try {
    const start = await postJson("/start", "POST", { transport: "webrtc" });
    const iceServers = (start.iceConfig && start.iceConfig.iceServers) || [];
    const stream = await navigator.mediaDevices.getUserMedia({
      audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true },
    });
    const pc = new RTCPeerConnection({ iceServers });
    session = { pc, stream, dc: null, pingTimer: null, pcId: null, sessionId: start.sessionId,
                lateCandidates: [] };
    startMeter(stream);

    pc.addTransceiver(stream.getAudioTracks()[0], { direction: "sendrecv" });
    pc.ontrack = (event) => { ui.audio.srcObject = event.streams[0] || new MediaStream([event.track]); };
    pc.onicecandidate = (event) => {
      if (!event.candidate || !session) return;
      const c = { candidate: event.candidate.candidate, sdp_mid: event.candidate.sdpMid,
                  sdp_mline_index: event.candidate.sdpMLineIndex };
      if (session.pcId) sendCandidates([c]); else session.lateCandidates.push(c);
    };
    pc.onconnectionstatechange = () => {
      if (!session || session.pc !== pc) return;
      if (pc.connectionState === "connected") showConnected();
      if (pc.connectionState === "failed") disconnect("The connection failed (network or ICE).");
    };

    const dc = pc.createDataChannel("chat", { ordered: true });
    session.dc = dc;
    dc.onopen = () => {
      dc.send(JSON.stringify({
        label: RTVI_LABEL, type: "client-ready", id: "ready-" + Date.now(),
        data: { version: RTVI_VERSION, about: { library: "voice-agent-playground" } },
      }));
      session.pingTimer = setInterval(() => { if (dc.readyState === "open") dc.send("ping"); }, 1000);
    };
    dc.onmessage = onChannelMessage;

    await pc.setLocalDescription(await pc.createOffer());
    await waitForIce(pc, 2000);
    session.lateCandidates = []; // already inside the offer's SDP
    const answer = await postJson(
      "/sessions/" + encodeURIComponent(start.sessionId) + "/api/offer", "POST",
      { sdp: pc.localDescription.sdp, type: pc.localDescription.type,
        ...(INTERPRETER ? { request_data: INTERPRETER } : {}) });
    session.pcId = answer.pc_id;
    await pc.setRemoteDescription({ sdp: answer.sdp, type: answer.type });
    if (session.lateCandidates.length) sendCandidates(session.lateCandidates.splice(0));
    ui.button.textContent = "Disconnect";
    ui.button.className = "danger";
  } catch (err) {
    disconnect();
    showError("Could not connect: " + (err && err.message ? err.message : err));
  } finally {
    ui.button.disabled = false;
  }
}

function sendCandidates(candidates) {
  const s = session;
  if (!s || !s.pcId) return;
  postJson("/sessions/" + encodeURIComponent(s.sessionId) + "/api/offer", "PATCH",
           { pc_id: s.pcId, candidates }).catch(() => {});
}

function disconnect(reason) {
  const s = session;
  session = null;
  if (s) {
    clearInterval(s.pingTimer);
    try { s.dc && s.dc.close(); } catch { /* already closed */ }
    try { s.pc.close(); } catch { /* already closed */ }
    s.stream && s.stream.getTracks().forEach((t) => t.stop());
  }
  ui.audio.srcObject = null;
  stopMeter();
  setPill(ui.botPill, false);
  if (sessionOver) setStatus(...sessionStatus); else setStatus("Disconnected", "idle");
  ui.button.textContent = "Connect";
  ui.button.className = "primary";
  if (reason) showError(reason);
}

ui.button.addEventListener("click", () => { if (session) disconnect(); else connect(); });
window.addEventListener("beforeunload", () => disconnect());
