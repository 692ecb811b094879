// svclab web: the lab's picture and a traced packet drawn on it. A trace
// (GET api/trace, views.TraceReport) carries the packet's way as steps
// (views.PacketStep): "open" (a socket sends the first packet), "send" (the
// packet crosses a link), "rewrite" (a host changes its source or
// destination), "pass" (a host forwards it unchanged), "end" (a host takes
// it). This file draws them: arrows with the addresses on the picture,
// and a table with each rewrite's before and after. app.js, loaded after
// this file, draws the rest of the page. Plain JavaScript, no build step.
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

// The picture's geometry: the node is one tall box in the middle, the
// client and the outside host on its left, the pods on its right, each
// on a row of its own, so that every link is a horizontal line.
const TOPO = { W: 1200, top: 34, row: 72, boxW: 160, boxH: 46, nodeX: 450, nodeW: 300 };

// The picture's state: the hosts last drawn and the trace on them.
const topo = { hosts: [], trace: null };

// hostPlaces lays out the hosts: name -> {x, y (the box's top), cy (its
// link's height), side}.
function hostPlaces(hosts) {
  const left = hosts.filter((h) => h.role !== "node" && h.role !== "pod");
  const right = hosts.filter((h) => h.role === "pod");
  const rows = Math.max(left.length, right.length, 3);
  const places = {};
  const column = (list, x, side) => list.forEach((h, i) => {
    const y = TOPO.top + ((rows - list.length) / 2 + i) * TOPO.row;
    places[h.name] = { x, y, cy: y + TOPO.boxH / 2, side, host: h };
  });
  column(left, 20, "left");
  column(right, TOPO.W - TOPO.boxW - 20, "right");
  return { places, rows, height: TOPO.top + rows * TOPO.row + 10 };
}

// drawTopology draws the hosts and their links, and the traced packet's
// way when there is one.
function drawTopology(hosts) {
  if (hosts) topo.hosts = hosts;
  const pic = $("topology");
  const { places, rows, height } = hostPlaces(topo.hosts);
  pic.setAttribute("viewBox", `0 0 ${TOPO.W} ${height}`);
  pic.replaceChildren(svg("defs", {}));
  const defs = pic.firstChild;
  for (const k of ["conn1", "conn2", "reply"]) {
    const m = svg("marker", { id: "arrow-" + k, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" });
    m.append(svg("path", { d: "M0,0 L10,5 L0,10 z", class: "head " + k }));
    defs.append(m);
  }
  const node = topo.hosts.find((h) => h.role === "node");
  const nodeY = TOPO.top - 14, nodeH = rows * TOPO.row - 8;
  const onPath = new Set();
  const tr = topo.trace;
  if (tr) for (const s of tr.path.steps) for (const h of [s.at, s.from, s.to]) if (h) onPath.add(h);

  // Links first, under the boxes.
  for (const [name, p] of Object.entries(places)) {
    const x1 = p.side === "left" ? p.x + TOPO.boxW : TOPO.nodeX + TOPO.nodeW;
    const x2 = p.side === "left" ? TOPO.nodeX : p.x;
    const g = svg("g", { class: "link" + (onPath.has(name) ? " on-path" : ""), "data-host": name });
    g.append(svg("line", { x1, y1: p.cy, x2, y2: p.cy }));
    if (p.host.link) {
      const atNode = p.side === "left" ? { x: TOPO.nodeX + 4, a: "start" } : { x: TOPO.nodeX + TOPO.nodeW - 4, a: "end" };
      g.append(svg("text", { x: atNode.x, y: p.cy + 4, "text-anchor": atNode.a, class: "ifname" }, p.host.link));
    }
    pic.append(g);
  }

  // The node.
  if (node) {
    const g = svg("g", { class: "host node" + (onPath.has(node.name) ? " on-path" : ""), "data-host": node.name });
    g.append(svg("rect", { x: TOPO.nodeX, y: nodeY, width: TOPO.nodeW, height: nodeH, rx: 8 }));
    g.append(svg("text", { x: TOPO.nodeX + TOPO.nodeW / 2, y: nodeY + 20, "text-anchor": "middle", class: "name" }, node.name + "  " + node.addr));
    g.append(svg("text", { x: TOPO.nodeX + TOPO.nodeW / 2, y: nodeY + 38, "text-anchor": "middle", class: "runs" }, clip(node.runs || "", 52)));
    pic.append(g);
  }
  // The other hosts.
  for (const [name, p] of Object.entries(places)) {
    const g = svg("g", { class: "host " + p.host.role + (onPath.has(name) ? " on-path" : ""), "data-host": name });
    g.append(svg("rect", { x: p.x, y: p.y, width: TOPO.boxW, height: TOPO.boxH, rx: 6 }));
    g.append(svg("text", { x: p.x + 8, y: p.y + 18, class: "name" }, name));
    g.append(svg("text", { x: p.x + 8, y: p.y + 36, class: "addr" }, p.host.addr + (p.host.role === "outside" ? "  (outside)" : "")));
    pic.append(g);
  }
  if (tr) drawWay(pic, places, node, nodeY);
}

// wrap breaks text into lines of at most n characters, at spaces.
function wrap(text, n) {
  const lines = [];
  let line = "";
  for (const word of text.split(" ")) {
    if (line && line.length + 1 + word.length > n) { lines.push(line); line = word; } else line = line ? line + " " + word : word;
  }
  if (line) lines.push(line);
  return lines;
}

// clip shortens text for a box, keeping its start.
function clip(s, n) { return s.length > n ? s.slice(0, n - 1) + "…" : s; }

// connClass is the colour of a step: the sender's connection, svcproxy's
// own, or a reply.
function connClass(s) { return s.reply ? "reply" : "conn" + s.conn; }

// drawWay draws the traced packet's steps on the picture: each send as an
// arrow along its link with the addresses it carries (the request above
// the line, the reply below), each rewrite and end as a numbered line in
// the box where it happens (the node's, or under a host's).
function drawWay(pic, places, node, nodeY) {
  const steps = topo.trace.path.steps;
  let nodeLine = 0;
  const under = {}; // host -> lines written under its box
  steps.forEach((s, i) => {
    const n = i + 1;
    if (s.kind === "send") {
      const far = s.from === node.name ? s.to : s.from;
      const p = places[far];
      if (!p) return;
      const towardNode = s.to === node.name;
      const hostEnd = p.side === "left" ? p.x + TOPO.boxW : p.x;
      const nodeEnd = p.side === "left" ? TOPO.nodeX : TOPO.nodeX + TOPO.nodeW;
      const dy = s.reply ? 7 : -7;
      const [x1, x2] = towardNode ? [hostEnd, nodeEnd] : [nodeEnd, hostEnd];
      const g = svg("g", { class: "hop " + connClass(s), "data-step": n, "data-from": s.from, "data-to": s.to, "data-conn": s.conn, "data-reply": String(s.reply) });
      g.append(svg("line", { x1, y1: p.cy + dy, x2, y2: p.cy + dy, "marker-end": "url(#arrow-" + connClass(s) + ")" }));
      const mid = (hostEnd + nodeEnd) / 2;
      g.append(svg("text", { x: mid, y: s.reply ? p.cy + dy + 13 : p.cy + dy - 5, "text-anchor": "middle", class: "addrs" }, n + ": " + s.src + " → " + s.dst));
      g.append(svg("title", {}, "step " + n + ": " + (s.reply ? "the reply" : "the packet") + " from " + s.from + " to " + s.to + ", source " + s.src + ", destination " + s.dst));
      pic.append(g);
      return;
    }
    // The node's box has room for every event there; under another
    // host's box only its rewrites are written (the socket LB's), the
    // rest is in the table below.
    if (s.kind === "send" || (s.at !== node.name && s.kind !== "rewrite")) return;
    const text = n + ": " + wayWords(s);
    const cls = "event " + s.kind + " " + connClass(s);
    const attrs = { class: cls, "data-step": n, "data-what": s.what || "", "data-at": s.at, "data-conn": s.conn, "data-reply": String(s.reply) };
    if (s.at === node.name) {
      const t = svg("text", attrs);
      for (const [j, line] of wrap(text, 42).entries()) {
        t.append(svg("tspan", { x: TOPO.nodeX + 12, y: nodeY + 62 + 15 * nodeLine++, dx: j ? 14 : 0 }, line));
      }
      t.append(svg("title", {}, text));
      pic.append(t);
      nodeLine += 0.3;
      return;
    }
    const p = places[s.at];
    if (!p) return;
    const k = under[s.at] = (under[s.at] || 0) + 1;
    attrs.x = p.x + 2;
    attrs.y = p.y + TOPO.boxH + 12 * k;
    pic.append(svg("text", attrs, clip(text, 28)));
    pic.lastChild.append(svg("title", {}, text));
  });
}

// wayWords is a rewrite, open or end in a few words, for the picture.
function wayWords(s) {
  switch (s.kind) {
    case "rewrite":
      return s.what + ": " + s.changed.split(" ").map((f, i) => f + " " + s.before.split(" ")[i] + " → " + (f === "src" ? s.src : s.dst)).join(", ");
    case "open":
      return s.what;
    default:
      return s.what;
  }
}

// drawTrace draws a trace: the ways and who chooses among them, the
// steps with their addresses, conntrack's entries, the rules, the result;
// and the way on the picture.
function drawTrace(rep, retrace) {
  topo.trace = rep;
  $("trace-command").textContent = "$ " + rep.command;
  $("trace-error").textContent = "";
  $("trace-out").hidden = false;
  drawWays(rep, retrace);
  $("ports-note").textContent = rep.path.ports || "";
  $("packet-steps").tBodies[0].replaceChildren(...rep.path.steps.map((s, i) => stepRow(s, i + 1)));
  $("packet-conntrack").tBodies[0].replaceChildren(...(rep.path.conntrack || []).map((e) => {
    const tr = el("tr", "entry conn" + e.conn);
    tr.dataset.conn = e.conn;
    tr.append(el("td", "", e.conn === 2 ? "2: svcproxy's own" : "1: the sender's"),
      el("td", "addr", e.sent[0] + " → " + e.sent[1]), el("td", "addr", e.reply[0] + " → " + e.reply[1]), el("td", "", e.means));
    return tr;
  }));
  if (!(rep.path.conntrack || []).length) {
    const tr = el("tr");
    const td = el("td", "why", "none: no connection is made");
    td.colSpan = 4;
    tr.append(td);
    $("packet-conntrack").tBodies[0].append(tr);
  }
  $("hop-count").textContent = String((rep.hops || []).length);
  const out = [el("div", "hop start", rep.from + " (" + rep.src + ") sends " + rep.proto + " to " + rep.dst + (rep.port ? ", " + rep.port : ""))];
  for (const h of rep.hops || []) {
    out.push(el("div", "arrow", "↓"));
    const d = el("div", "hop " + h.tracer);
    d.append(el("div", "where", h.tracer + (h.table ? " " + h.table : "") + " › " + h.chain));
    if (h.rule) d.append(el("div", "rule", h.rule));
    if (h.note) d.append(el("div", "note", h.note));
    out.push(d);
  }
  $("trace").replaceChildren(...out);
  $("trace-result").textContent = rep.result;
  drawTopology();
}

// stepRow is one step of the table: where, what, and the addresses, the
// changed one shown with what it was.
function stepRow(s, n) {
  const tr = el("tr", "step " + s.kind + " " + connClass(s));
  Object.assign(tr.dataset, { step: n, kind: s.kind, what: s.what || "", conn: s.conn, reply: String(s.reply) });
  const where = s.kind === "send" ? s.from + " → " + s.to : s.at;
  const what = el("td", "what");
  const words = { open: "", send: s.reply ? "the reply crosses the link" : "crosses the link", pass: "", end: "" }[s.kind];
  what.append(el("b", "", s.kind === "rewrite" ? s.what : (s.what || words)));
  if (s.kind === "rewrite" && s.by) what.append(el("div", "by", "by " + s.by));
  const changed = (s.changed || "").split(" ");
  const before = (s.before || "").split(" ");
  const addr = (field, value) => {
    const td = el("td", "addr " + field);
    const i = changed.indexOf(field);
    if (s.kind === "rewrite" && i >= 0) {
      td.classList.add("changed");
      td.append(el("s", "before", before[i]), " → ", el("b", "after", value));
    } else {
      td.textContent = value;
    }
    return td;
  };
  tr.append(el("td", "n", String(n)), el("td", "where", where), what, addr("src", s.src), addr("dst", s.dst));
  return tr;
}

// drawWays lists every way the choices can go, with its chance, each a
// button that traces it.
function drawWays(rep, retrace) {
  const ways = rep.ways || [];
  const who = {
    "random": "The rules choose at random, each way with the probability shown (statistic --mode random, numgen random): --pick N follows way N.",
    "round-robin": "svcproxy's userspace proxy chooses, in turn (round-robin), not at random: each endpoint gets an equal share of new connections. --pick N follows endpoint N.",
  }[rep.choice] || (rep.choice ? rep.choice + "." : "One way only: nothing is chosen.");
  $("ways-why").textContent = who;
  $("ways").replaceChildren(...ways.map((w, i) => {
    const li = el("li", "way" + (i === rep.pick % Math.max(1, ways.length) ? " picked" : ""));
    li.dataset.pick = i;
    li.append(el("span", "", w.result + "  "), el("b", "p", w.p > 0 ? (100 * w.p).toFixed(1) + "%" : "share unknown"), " ");
    if (ways.length > 1) {
      const b = el("button", "follow", i === rep.pick % ways.length ? "followed" : "follow this way");
      b.type = "button";
      b.disabled = i === rep.pick % ways.length;
      b.addEventListener("click", () => retrace(i));
      li.append(b);
    }
    return li;
  }));
}
