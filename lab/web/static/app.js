// svclab web: draws the States the server sends (server-sent events) and
// sends the controls; packet.js, loaded first, draws the lab's picture and
// a traced packet. Plain JavaScript, no build step: read it as it is.
"use strict";

// fill replaces a select's options, keeping the chosen one when it is still there.
function fill(select, values, preferred) {
  const keep = select.value || preferred;
  const same = select.options.length === values.length && values.every((v, i) => select.options[i].value === v);
  if (same) return;
  select.replaceChildren(...values.map((v) => { const o = el("option", "", v); o.value = v; return o; }));
  if (values.includes(keep)) select.value = keep;
}

// The hosts last drawn, to redraw the picture only when they change.
let hostsKey = "";

function drawHosts(hosts) {
  hosts = hosts || [];
  const body = $("hosts").tBodies[0];
  body.replaceChildren(...hosts.map((h) => {
    const tr = el("tr", "host " + h.role);
    tr.dataset.host = h.name;
    for (const v of [h.name, h.namespace, h.addr, h.addr6, h.runs]) tr.append(el("td", "", v));
    return tr;
  }));
  const key = JSON.stringify(hosts);
  if (key !== hostsKey) {
    hostsKey = key;
    drawTopology(hosts);
  }
  const names = hosts.map((h) => h.name);
  fill($("trace-from"), names, "client");
  fill($("pod-name"), hosts.filter((h) => h.role === "pod").map((h) => h.name), "web-1");
}

// drawNodes draws the cluster's nodes, each with the pods bound to it;
// the section stays hidden on a lab without a control plane.
function drawNodes(nodes) {
  nodes = nodes || [];
  $("nodes-section").hidden = nodes.length === 0;
  $("nodes").replaceChildren(...nodes.map((n) => {
    const d = el("div", "node " + n.role + (n.ready ? "" : " notready"));
    d.dataset.node = n.name;
    const head = el("div", "head");
    head.append(el("span", "name", n.name), " ", el("span", "role", n.role), " ",
      el("span", "state", n.ready ? "Ready" : "NotReady"));
    d.append(head);
    d.append(el("div", "addr", n.addr + (n.podCIDR ? ", pods in " + n.podCIDR : "")));
    if (n.taints && n.taints.length) d.append(el("div", "taints", "taints: " + n.taints.join(", ")));
    const pods = n.pods || [];
    const ul = el("ul", "pods");
    ul.append(...pods.map((p) => {
      let cls = "pod " + (p.namespace === "kube-system" ? "system" : "workload");
      if (p.hostNetwork) cls += " hostnet";
      if (!p.ready) cls += " notready";
      const li = el("li", cls);
      li.dataset.pod = p.namespace + "/" + p.name;
      li.append(el("span", "pname", (p.namespace === "default" ? "" : p.namespace + "/") + p.name), " ",
        el("span", "ip", (p.ip || "no address yet") + (p.hostNetwork ? " (host network)" : "")));
      li.title = [p.phase, p.ready ? "Ready" : "not Ready", p.owner ? "made by " + p.owner : ""].filter(Boolean).join(", ");
      return li;
    }));
    d.append(el("div", "count", pods.length === 1 ? "1 pod" : pods.length + " pods"), ul);
    return d;
  }));
}

// family is an endpoint's IP family, read from its address.
const family = (addr) => addr.startsWith("[") ? "IPv6" : "IPv4";

function drawServices(view) {
  $("mode").textContent = view ? "svcproxy --mode " + view.mode + (view.offload ? " (offload " + view.offload + ")" : "") : "";
  $("kernel-note").textContent = view && view.kernelCounts ? "Kernel counts: " + view.kernelCounts : "";
  const counted = !view || view.kernelCounted;
  const ports = (view && view.ports) || [];
  $("services").replaceChildren(...ports.map((p) => {
    const d = el("div", "port");
    d.dataset.port = p.name;
    const head = el("div");
    head.append(el("span", "name", p.name + " "), el("span", "path " + p.path, p.path));
    d.append(head);
    d.append(el("div", "addr", (p.vips || []).join(", ") + " port " + p.port + "/" + p.protocol + (p.nodePort ? " (NodePort " + p.nodePort + ")" : "")));
    const c = el("div", "counts");
    const k = el("b", "kernel-count" + (counted ? "" : " uncounted"), counted ? String(p.kernel) : "not counted");
    k.dataset.counted = String(counted);
    c.append("connections: userspace ", el("b", "userspace-count", String(p.userspace)), ", kernel ", k);
    d.append(c);
    // A dual-stack port has each endpoint once per family: group them,
    // each group named, so that web-0 twice reads as its two addresses.
    const eps = p.endpoints || [];
    const families = [...new Set(eps.map((e) => family(e.addr)))];
    for (const fam of families) {
      const row = el("div", "eps");
      row.dataset.family = fam;
      if (families.length > 1) row.append(el("span", "family", fam + ":"));
      for (const e of eps.filter((e) => family(e.addr) === fam)) {
        let cls = "ep", words = "ready";
        if (e.terminating) { cls += " terminating"; words = e.serving ? "terminating, serving" : "terminating"; }
        else if (!e.ready) { cls += " notready"; words = e.serving ? "not ready, serving" : "not ready"; }
        const s = el("span", cls, (e.pod || e.addr) + ": " + words + (e.kernel ? " (" + e.kernel + " via kernel)" : ""));
        s.title = e.addr;
        s.dataset.pod = e.pod;
        s.dataset.family = fam;
        row.append(s);
      }
      d.append(row);
    }
    return d;
  }));
  // A Service's short name (namespace default left out), and how svclab
  // traffic addresses it: udp://NAME when it has no TCP port.
  const short = (svc) => svc.startsWith("default/") ? svc.slice(8) : svc;
  const services = [...new Set(ports.map((p) => p.service))];
  fill($("trace-service"), services.map(short), "web");
  fill($("conntrack-service"), services.map(short), "web");
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
    // A label near the right edge is written leftwards of its line, so
    // that the chart's edge does not cut it.
    const right = x(m.t) > W - 180;
    g.append(svg("text", { x: x(m.t) + (right ? -3 : 3), y: T + 22 + 12 * (i % 5), "text-anchor": right ? "end" : "start" }, what));
    g.append(svg("title", {}, m.kind + ": " + (m.port ? m.port + " " : "") + m.from + " → " + m.to + " at " + m.t.toFixed(1) + " s"));
    chart.append(g);
  });
}

// The commands last seen running, to read conntrack again when traffic ends.
const runningBefore = new Set();

function drawCommands(cmds) {
  cmds = cmds || [];
  const byID = Object.fromEntries(cmds.map((c) => [c.id, c]));
  $("commands").replaceChildren(...cmds.slice().reverse().slice(0, 10).map((c) => {
    const li = el("li", c.queued ? "queued" : c.running ? "running" : (c.error ? "failed" : "done"));
    li.dataset.id = c.id;
    let state = "done";
    if (c.queued) state = "queued: runs when #" + c.after + (byID[c.after] ? " (" + byID[c.after].command + ")" : "") + " has ended";
    else if (c.running) state = "running…";
    else if (c.error) state = "failed: " + c.error;
    li.append(el("span", "command", "$ " + c.command), " ", el("span", "state", state));
    if (c.output) li.append(el("pre", "", c.output));
    return li;
  }));
  for (const c of cmds) {
    if (runningBefore.has(c.id) && !c.running && !c.queued && c.command.includes(" traffic ")) readConntrack();
    if (c.running) runningBefore.add(c.id); else runningBefore.delete(c.id);
  }
}

function draw(st) {
  $("status").textContent = st.error ? "lab: " + st.error : "";
  drawHosts(st.hosts);
  drawNodes(st.nodes);
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

// trace asks for a trace, following way pick of its choices.
async function trace(pick) {
  const q = new URLSearchParams({ from: $("trace-from").value, service: $("trace-service").value });
  if (pick) q.set("pick", String(pick));
  $("trace-error").textContent = "tracing…";
  const r = await fetch("api/trace?" + q);
  const body = await r.json();
  if (!r.ok) {
    $("trace-error").textContent = body.error;
    $("trace-out").hidden = true;
    topo.trace = null;
    drawTopology();
    return;
  }
  drawTrace(body, trace);
}

$("trace-form").addEventListener("submit", (e) => {
  e.preventDefault();
  trace(0);
});

// maxConntrackRows bounds the conntrack table: after a few hundred
// requests the node keeps hundreds of entries, and the newest tell it all.
const maxConntrackRows = 40;

// readConntrack reads the node's conntrack entries of the chosen Service.
async function readConntrack() {
  const svc = $("conntrack-service").value;
  if (!svc) return;
  const r = await fetch("api/conntrack?" + new URLSearchParams({ service: svc }));
  const body = await r.json();
  if (!r.ok) { $("conntrack-error").textContent = body.error; return; }
  $("conntrack-error").textContent = "";
  $("conntrack-command").textContent = "$ " + body.command;
  const entries = body.entries || [];
  const n = entries.length;
  $("conntrack-summary").textContent = (body.service ? body.service + "; " : "") + "svcproxy runs " + body.mode + " mode; " +
    (n === 1 ? "1 entry" : n + " entries") + (n ? ", newest first" : ": send some traffic first") +
    (n > maxConntrackRows ? "; the newest " + maxConntrackRows + " are listed (svclab conntrack lists them all)" : "");
  $("conntrack").tBodies[0].replaceChildren(...entries.slice(0, maxConntrackRows).map((e) => {
    const tr = el("tr", "entry");
    tr.append(el("td", "", e.proto), el("td", "", e.state), el("td", "addr", e.sent[0] + " → " + e.sent[1]),
      el("td", "addr", e.reply[0] + " → " + e.reply[1]), el("td", "", e.means));
    return tr;
  }));
}

$("conntrack-form").addEventListener("submit", (e) => {
  e.preventDefault();
  readConntrack();
});

// control posts a control. The server runs one at a time: a control sent
// while another runs is queued (the list says behind which), and one sent
// while too many wait is refused with the reason.
//
// The page sends its controls in the order they were clicked, each once the
// one before has been answered: two clicks in a row reach the server in
// that order, and run in that order.
let sending = Promise.resolve();
function control(c) {
  sending = sending.then(() => post(c), () => post(c));
  return sending;
}

async function post(c) {
  $("control-error").textContent = "";
  $("control-note").textContent = "";
  const r = await fetch("api/run", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(c) });
  const body = await r.json();
  if (!r.ok) { $("control-error").textContent = body.error; return; }
  if (body.queued) $("control-note").textContent = "queued: $ " + body.command + " runs when #" + body.after + " has ended (the controls run one at a time)";
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
