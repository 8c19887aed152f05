"""The one page of `escher view` (self-contained: no request leaves the server)."""

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>escher view</title>
<style>
 body { font: 14px system-ui, sans-serif; margin: 1.2em; color: #222; background: #fafafa; }
 h1 { font-size: 1.3em; margin: 0 0 .2em; } h2 { font-size: 1.05em; margin: 1.2em 0 .4em; }
 #status { color: #666; font-size: .9em; }
 #nodes { display: flex; flex-wrap: wrap; gap: .8em; }
 .node { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: .6em .8em;
         min-width: 15em; }
 .node.dead { opacity: .5; } .node h3 { margin: 0 0 .4em; font-size: 1em; }
 .bar { margin: .25em 0; } .bar .name { font-size: .85em; color: #444; }
 .track { background: #eee; border-radius: 3px; height: .7em; overflow: hidden; }
 .fill { height: 100%; background: #4a7bd0; } .eph .fill { background: #d08a2e; }
 .num { float: right; font-size: .8em; color: #555; }
 table { border-collapse: collapse; width: 100%; background: #fff; }
 td, th { border: 1px solid #ddd; padding: .3em .5em; vertical-align: top; text-align: left; }
 .v-placeable { color: #2a7; } .v-waiting { color: #b80; } .v-blocked { color: #c33; }
 .v-never { color: #900; font-weight: bold; } .v-feasible { color: #2a7; }
 .v-infeasible { color: #c33; } pre { margin: .2em 0; white-space: pre-wrap; font-size: .85em; }
 .muted { color: #888; }
</style>
</head>
<body>
<h1>escher view</h1>
<div id="status">connecting...</div>
<h2>Nodes</h2>
<div id="nodes"></div>
<h2>Ephemeral labels</h2>
<div id="labels" class="muted">none</div>
<h2>Intents in force</h2>
<div id="intents" class="muted">none</div>
<h2>Pending tasks</h2>
<div id="pending" class="muted">none</div>
<script>
"use strict";
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}
function fmt(x) {
  if (x >= 2 ** 30) return (x / 2 ** 30).toFixed(1) + "Gi";
  return Number.isInteger(x) ? String(x) : x.toFixed(2);
}
function bar(b, cls) {
  const d = el("div", "bar " + cls);
  const pct = b.total > 0 ? Math.min(100, 100 * b.used / b.total) : 0;
  d.appendChild(el("span", "num", fmt(b.used) + " / " + fmt(b.total)));
  d.appendChild(el("div", "name", b.name));
  const t = el("div", "track"); const f = el("div", "fill");
  f.style.width = pct + "%"; t.appendChild(f); d.appendChild(t);
  return d;
}
function renderNodes(nodes) {
  const box = document.getElementById("nodes"); box.replaceChildren();
  const labels = new Map();
  for (const n of nodes) {
    const card = el("div", "node" + (n.alive ? "" : " dead"));
    card.dataset.node = n.id;
    card.appendChild(el("h3", "", n.id));
    for (const b of n.physical) card.appendChild(bar(b, "phys"));
    for (const b of n.ephemeral) {
      card.appendChild(bar(b, "eph"));
      labels.set(b.name, (labels.get(b.name) || []).concat([n.id]));
    }
    box.appendChild(card);
  }
  const lb = document.getElementById("labels"); lb.replaceChildren();
  if (!labels.size) { lb.textContent = "none"; return; }
  lb.className = "";
  const ul = el("ul");
  for (const [name, where] of [...labels.entries()].sort()) {
    const li = el("li", "", name + " on " + where.join(", "));
    li.dataset.label = name; ul.appendChild(li);
  }
  lb.appendChild(ul);
}
function renderIntents(intents) {
  const box = document.getElementById("intents"); box.replaceChildren();
  if (!intents.length) { box.textContent = "none"; box.className = "muted"; return; }
  box.className = "";
  const table = el("table");
  table.appendChild(el("tr")).append(el("th", "", "policy"), el("th", "", "verdict"),
                                     el("th", "", "intents"));
  for (const p of intents) {
    const tr = el("tr");
    const count = p.tasks !== undefined ? " (" + p.tasks + " tasks)" : "";
    tr.appendChild(el("td", "", p.source + count));
    tr.appendChild(el("td", "v-" + (p.verdict || ""), p.verdict || p.error || ""));
    const td = el("td");
    for (const i of p.intents || []) td.appendChild(el("div", "", i.intent + ": " + i.status));
    if (p.explanation) td.appendChild(el("pre", "", p.explanation));
    tr.appendChild(td); table.appendChild(tr);
  }
  box.appendChild(table);
}
function renderPending(pending) {
  const box = document.getElementById("pending"); box.replaceChildren();
  if (!pending.tasks.length) { box.textContent = "none"; box.className = "muted"; return; }
  box.className = "";
  const table = el("table");
  table.appendChild(el("tr")).append(el("th", "", "task"), el("th", "", "verdict"),
                                     el("th", "", "why"));
  for (const t of pending.tasks) {
    const tr = el("tr"); tr.dataset.task = t.id;
    tr.appendChild(el("td", "", t.name + " (" + t.id + ")"));
    tr.appendChild(el("td", "v-" + t.verdict, t.verdict));
    const td = el("td");
    td.appendChild(el("div", "", t.summary));
    td.appendChild(el("div", "muted", t.breakdown));
    for (const w of t.waiting) td.appendChild(el("div", "", "waits for: " + w));
    if (t.conflict) td.appendChild(el("pre", "", t.conflict));
    tr.appendChild(td); table.appendChild(tr);
  }
  box.appendChild(table);
  if (pending.more) box.appendChild(el("div", "muted", "and " + pending.more + " more"));
}
function render(data) {
  document.getElementById("status").textContent =
    data.backend.name + " backend, updated " + new Date().toLocaleTimeString();
  renderNodes(data.nodes); renderIntents(data.intents); renderPending(data.pending);
}
const source = new EventSource("events");
source.onmessage = (event) => render(JSON.parse(event.data));
source.onerror = () => {
  document.getElementById("status").textContent = "disconnected; retrying...";
};
</script>
</body>
</html>
"""
