// svclab web: draws the States the server sends (server-sent events) and
// sends the controls. Plain JavaScript, no build step: read it as it is.
"use strict";

const $ = (id) => document.getElementById(id);

// el makes an element with a class and text (never HTML from the lab).
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

// fill replaces a select's options, keeping the chosen one when it is still there.
function fill(select, values, preferred) {
  const keep = select.value || preferred;
  const same = select.options.length === values.length && values.every((v, i) => select.options[i].value === v);
  if (same) return;
  select.replaceChildren(...values.map((v) => { const o = el("option", "", v); o.value = v; return o; }));
  if (values.includes(keep)) select.value = keep;
}

function drawHosts(hosts) {
  const body = $("hosts").tBodies[0];
  body.replaceChildren(...(hosts || []).map((h) => {
    const tr = el("tr", "host " + h.role);
    tr.dataset.host = h.name;
    for (const v of [h.name, h.namespace, h.addr, h.addr6, h.runs]) tr.append(el("td", "", v));
    return tr;
  }));
  const names = (hosts || []).map((h) => h.name);
  fill($("trace-from"), names, "client");
  fill($("pod-name"), (hosts || []).filter((h) => h.role === "pod").map((h) => h.name), "web-1");
}

function drawServices(view) {
  $("mode").textContent = view ? "svcproxy --mode " + view.mode + (view.offload ? " (offload " + view.offload + ")" : "") : "";
  const ports = (view && view.ports) || [];
  $("services").replaceChildren(...ports.map((p) => {
    const d = el("div", "port");
    d.dataset.port = p.name;
    const head = el("div");
    head.append(el("span", "name", p.name + " "), el("span", "path " + p.path, p.path));
    d.append(head);
    d.append(el("div", "addr", (p.vips || []).join(", ") + " port " + p.port + "/" + p.protocol + (p.nodePort ? " (NodePort " + p.nodePort + ")" : "")));
    const c = el("div", "counts");
    c.append("connections: userspace ", el("b", "userspace-count", String(p.userspace)), ", kernel ", el("b", "kernel-count", String(p.kernel)));
    d.append(c);
    const eps = el("div", "eps");
    for (const e of p.endpoints || []) {
      let cls = "ep", words = "ready";
      if (e.terminating) { cls += " terminating"; words = e.serving ? "terminating, serving" : "terminating"; }
      else if (!e.ready) { cls += " notready"; words = e.serving ? "not ready, serving" : "not ready"; }
      const s = el("span", cls, (e.pod || e.addr) + ": " + words + (e.kernel ? " (" + e.kernel + " via kernel)" : ""));
      s.title = e.addr;
      s.dataset.pod = e.pod;
      eps.append(s);
    }
    d.append(eps);
    return d;
  }));
  // A Service's short name (namespace default left out), and how svclab
  // traffic addresses it: udp://NAME when it has no TCP port.
  const short = (svc) => svc.startsWith("default/") ? svc.slice(8) : svc;
  const services = [...new Set(ports.map((p) => p.service))];
  fill($("trace-service"), services.map(short), "web");
  fill($("traffic-target"), services.filter((svc) => svc.startsWith("default/")).map((svc) =>
    ports.some((p) => p.service === svc && p.protocol === "TCP") ? short(svc) : "udp://" + short(svc)), "web");
}

// drawChart draws the timeline: a stacked bar per sample (userspace below,
// kernel above), a dashed line at each mark.
function drawChart(tl) {
  const chart = $("chart");
  const W = 720, H = 220, L = 40, B = 20, T = 10;
  const samples = (tl && tl.samples) || [];
  const marks = (tl && tl.marks) || [];
  chart.replaceChildren();
  const end = samples.length ? samples[samples.length - 1].t : 0;
  // The last two minutes, and at least 30 seconds wide, so that the first
  // seconds after the page opens are not one thin column.
  const begin = Math.max(0, end - 120);
  const span = Math.min(120, Math.max(30, end - begin));
  const top = Math.max(10, ...samples.map((s) => s.userspace + s.kernel));
  const x = (t) => L + (W - L - 5) * (t - begin) / span;
  const y = (v) => H - B - (H - B - T) * v / top;
  chart.append(svg("line", { x1: L, y1: H - B, x2: W - 5, y2: H - B, stroke: "#999" }));
  chart.append(svg("line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "#999" }));
  chart.append(svg("text", { x: 2, y: T + 8 }, Math.round(top) + "/s"));
  chart.append(svg("text", { x: 2, y: H - B }, "0"));
  chart.append(svg("text", { x: W - 190, y: T + 8 }, "seconds since svclab web started"));
  const bw = Math.max(2, (W - L) / span - 1);
  for (const s of samples) {
    if (s.t < begin) continue;
    if (s.userspace > 0) chart.append(svg("rect", { class: "bar userspace", x: x(s.t) - bw, y: y(s.userspace), width: bw, height: H - B - y(s.userspace) }));
    if (s.kernel > 0) chart.append(svg("rect", { class: "bar kernel", x: x(s.t) - bw, y: y(s.userspace + s.kernel), width: bw, height: H - B - y(s.kernel) }));
  }
  const tick = span > 60 ? 20 : 10;
  for (let t = Math.ceil(begin / tick) * tick; t <= begin + span; t += tick) chart.append(svg("text", { x: x(t) - 6, y: H - 6 }, String(t)));
  marks.forEach((m, i) => {
    if (m.t < begin) return;
    const g = svg("g", { class: "mark " + m.kind });
    g.append(svg("line", { x1: x(m.t), y1: T, x2: x(m.t), y2: H - B }));
    const what = m.kind === "mode" ? "mode " + m.to : (m.port + " → " + m.to);
    g.append(svg("text", { x: x(m.t) + 3, y: T + 10 + 12 * (i % 5) }, what));
    g.append(svg("title", {}, m.kind + ": " + (m.port ? m.port + " " : "") + m.from + " → " + m.to + " at " + m.t.toFixed(1) + " s"));
    chart.append(g);
  });
}

function drawCommands(cmds) {
  $("commands").replaceChildren(...(cmds || []).slice().reverse().slice(0, 10).map((c) => {
    const li = el("li", c.running ? "running" : (c.error ? "failed" : "done"));
    li.dataset.id = c.id;
    li.append(el("span", "command", "$ " + c.command), " ", el("span", "", c.running ? "running…" : (c.error ? "failed: " + c.error : "done")));
    if (c.output) li.append(el("pre", "", c.output));
    return li;
  }));
}

function draw(st) {
  $("status").textContent = st.error ? "lab: " + st.error : "";
  drawHosts(st.hosts);
  drawServices(st.services);
  drawChart(st.timeline);
  drawCommands(st.commands);
  fill($("mode-name"), st.modes || [], "hybrid");
  document.body.dataset.updated = st.at;
}

// EventSource reconnects by itself when svclab web or the lab restarts.
const events = new EventSource("api/events");
events.addEventListener("state", (e) => draw(JSON.parse(e.data)));
events.onerror = () => { $("status").textContent = "reconnecting…"; };

function drawTrace(rep) {
  $("trace-command").textContent = "$ " + rep.command;
  const out = [];
  out.push(el("div", "hop start", rep.from + " (" + rep.src + ") sends " + rep.proto + " to " + rep.dst + (rep.port ? ", " + rep.port : "")));
  for (const h of rep.hops || []) {
    out.push(el("div", "arrow", "↓"));
    const d = el("div", "hop " + h.tracer);
    d.append(el("div", "where", h.tracer + (h.table ? " " + h.table : "") + " › " + h.chain));
    if (h.rule) d.append(el("div", "rule", h.rule));
    if (h.note) d.append(el("div", "note", h.note));
    out.push(d);
  }
  out.push(el("div", "arrow", "↓"));
  out.push(el("div", "result", rep.result));
  $("trace").replaceChildren(...out);
}

$("trace-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const q = new URLSearchParams({ from: $("trace-from").value, service: $("trace-service").value });
  $("trace").replaceChildren(el("div", "", "tracing…"));
  const r = await fetch("api/trace?" + q);
  const body = await r.json();
  if (!r.ok) { $("trace").replaceChildren(el("div", "error", body.error)); return; }
  drawTrace(body);
});

async function control(c) {
  $("control-error").textContent = "";
  const r = await fetch("api/run", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(c) });
  const body = await r.json();
  if (!r.ok) $("control-error").textContent = body.error;
}

$("traffic-form").addEventListener("submit", (e) => {
  e.preventDefault();
  control({ action: "traffic", target: $("traffic-target").value, n: Number($("traffic-n").value), rate: Number($("traffic-rate").value) });
});
$("pod-form").addEventListener("submit", (e) => {
  e.preventDefault();
  control({ action: "pod", pod: $("pod-name").value, change: $("pod-change").value });
});
$("mode-form").addEventListener("submit", (e) => {
  e.preventDefault();
  control({ action: "mode", mode: $("mode-name").value });
});
