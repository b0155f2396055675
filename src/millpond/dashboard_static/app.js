// millpond's dashboard: polls /api/state (the graph, views, epochs) and /api/jobs (progress).
"use strict";

const COLORS = { source: "#8a55c7", table: "#3b6fd8", view: "#1f9d6b", sink: "#d9822b", flow: "#2b95a8" };
const BAD = "#d6336c";
let cy = null, shape = "", selected = null, durationPlot = null, rowsPlot = null;

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function count(n) {
  if (n === null || n === undefined) return "–";
  if (n >= 1e9) return (n / 1e9).toFixed(1) + "G";
  if (n >= 1e6) return (n / 1e6).toFixed(1) + "M";
  if (n >= 1e4) return (n / 1e3).toFixed(0) + "k";
  return String(n);
}

function seconds(s) {
  if (s === null || s === undefined) return "–";
  if (s < 1) return "current";
  if (s < 90) return `${s.toFixed(0)} s behind`;
  if (s < 5400) return `${(s / 60).toFixed(0)} min behind`;
  return `${(s / 3600).toFixed(1)} h behind`;
}

function label(n) {
  if (n.kind === "view") {
    const state = n.status === "failed" ? "FAILED" : n.altering ? "altering" : seconds(n.freshness_seconds);
    return `${n.name}\n${count(n.rows)} rows · ${bytes(n.state_bytes)}\n${state}`;
  }
  if (n.kind === "table") return `${n.name}\n${count(n.rows)} rows`;
  if (n.kind === "source") return `${n.name}\n${n.lag === null ? "" : "lag " + count(n.lag)}`;
  if (n.kind === "sink") {
    const behind = n.behind_epochs === null || n.behind_epochs === undefined ? "" :
      n.behind_epochs ? `${n.behind_epochs} epochs behind` : "current";
    return `${n.name}\n${n.connector || ""} ${n.type || ""}\n${behind}`;
  }
  return n.name;
}

function drawGraph(state) {
  const elements = [
    ...state.nodes.map(n => ({ data: { id: n.id, label: label(n), kind: n.kind, name: n.name,
                                        failed: n.status === "failed" ? 1 : 0 } })),
    ...state.edges.map((e, i) => ({ data: { id: `e${i}`, source: e.source, target: e.target } })),
  ];
  const key = JSON.stringify([state.nodes.map(n => n.id), state.edges]);
  if (cy && key === shape) {  // same graph: relabel in place, keep the layout
    for (const n of state.nodes) {
      const node = cy.getElementById(n.id);
      node.data("label", label(n));
      node.data("failed", n.status === "failed" ? 1 : 0);
    }
    return;
  }
  shape = key;
  if (cy) cy.destroy();
  cy = cytoscape({
    container: document.getElementById("graph"),
    elements,
    style: [
      { selector: "node", style: {
          "shape": "round-rectangle", "width": 170, "height": 62, "label": "data(label)",
          "text-wrap": "wrap", "text-valign": "center", "font-size": 11, "color": "#fff",
          "background-color": ele => COLORS[ele.data("kind")] || "#777", "border-width": 0 } },
      { selector: "node[failed = 1]", style: { "background-color": BAD, "border-width": 3, "border-color": "#7a0d33" } },
      { selector: "node:selected", style: { "border-width": 3, "border-color": "#1d2330" } },
      { selector: "edge", style: { "width": 2, "line-color": "#b7bfcc", "target-arrow-color": "#b7bfcc",
                                    "target-arrow-shape": "triangle", "curve-style": "bezier" } },
    ],
    layout: { name: "dagre", rankDir: "LR", nodeSep: 18, rankSep: 60 },
    userZoomingEnabled: true, wheelSensitivity: 0.2,
  });
  cy.on("tap", "node[kind = 'view']", ev => showView(ev.target.data("name")));
}

function drawViews(state) {
  const body = document.querySelector("#views tbody");
  body.innerHTML = "";
  const views = state.nodes.filter(n => n.kind === "view").sort((a, b) => a.name.localeCompare(b.name));
  for (const v of views) {
    const tr = document.createElement("tr");
    tr.className = `view-row ${v.status === "failed" ? "failed" : ""}`;
    tr.dataset.view = v.name;
    const cells = [v.name, v.altering ? `${v.status} (altering)` : v.status, count(v.rows), bytes(v.state_bytes),
                   v.epoch ?? "–", v.behind_epochs ?? "–", seconds(v.freshness_seconds), v.error || ""];
    cells.forEach((c, i) => {
      const td = document.createElement("td");
      td.textContent = c;
      if (i === 1) td.className = `status-${v.status}`;
      tr.appendChild(td);
    });
    tr.addEventListener("click", () => showView(v.name));
    body.appendChild(tr);
  }
  const failed = views.filter(v => v.status === "failed").length;
  const health = document.getElementById("health");
  health.textContent = failed ? `${failed} failed` : `${views.length} views ok`;
  health.className = `pill ${failed ? "bad" : "good"}`;
}

function plot(element, title, series, data, previous) {
  const width = element.clientWidth || 500;
  const opts = { title, width, height: 160, series: [{}, ...series], axes: [{}, { size: 60 }],
                 scales: { x: { time: true } }, legend: { show: true } };
  if (previous && previous.width === width) { previous.plot.setData(data); return previous; }
  if (previous) previous.plot.destroy();
  element.innerHTML = "";
  return { plot: new uPlot(opts, data, element), width };
}

function drawPlots(state) {
  const epochs = state.epochs || [];
  const x = epochs.map(e => e.at);
  durationPlot = plot(document.getElementById("plot-duration"), "epoch duration (s)",
                      [{ label: "seconds", stroke: "#3b6fd8", width: 2, points: { show: true } }],
                      [x, epochs.map(e => e.seconds)], durationPlot);
  rowsPlot = plot(document.getElementById("plot-rows"), "throughput per epoch",
                  [{ label: "records in", stroke: "#1f9d6b", width: 2, points: { show: true } },
                   { label: "changes out", stroke: "#d9822b", width: 2, points: { show: true } }],
                  [x, epochs.map(e => e.rows_in), epochs.map(e => e.rows_out)], rowsPlot);
}

async function showView(name) {
  selected = name;
  document.getElementById("detail-title").textContent = name;
  const body = document.getElementById("detail-body");
  body.innerHTML = '<p class="muted">loading…</p>';
  const response = await fetch(`/api/views/${encodeURIComponent(name)}`);
  const view = await response.json();
  if (selected !== name) return;
  body.innerHTML = "";
  const node = (window.lastState?.nodes || []).find(n => n.id === `view:${name}`);
  if (node && node.error) {
    const p = document.createElement("p");
    p.className = "error";
    p.id = "detail-error";
    p.textContent = node.error;
    body.appendChild(p);
  }
  for (const [title, text, id] of [["SQL", view.sql, "detail-sql"], ["EXPLAIN", view.explain, "detail-explain"]]) {
    const h = document.createElement("h3");
    h.textContent = title;
    const pre = document.createElement("pre");
    pre.id = id;
    pre.textContent = text || view.error || "";
    body.append(h, pre);
  }
}

function drawJobs(jobs) {
  const box = document.getElementById("jobs");
  if (!jobs.length) { box.innerHTML = '<p class="muted">No job running.</p>'; return; }
  const rows = jobs.map(j => {
    const pct = j.progress === null || j.progress === undefined ? null : Math.round(j.progress * 100);
    const eta = j.eta_seconds === null || j.eta_seconds === undefined ? "" : ` · ${Math.round(j.eta_seconds)} s left`;
    return `<tr class="job"><td>${j.job}</td><td>${j.kind}</td><td>${j.relation}</td><td>${count(j.records)} records</td>
      <td><div class="bar"><div style="width:${pct ?? 0}%"></div></div></td><td>${pct === null ? "–" : pct + "%"}${eta}</td></tr>`;
  });
  box.innerHTML = `<table><thead><tr><th>job</th><th>kind</th><th>relation</th><th>input</th><th>progress</th><th></th></tr></thead>
    <tbody>${rows.join("")}</tbody></table>`;
}

async function refreshState() {
  try {
    const state = await (await fetch("/api/state")).json();
    window.lastState = state;
    document.getElementById("root").textContent = state.root;
    document.getElementById("epoch").textContent = `epoch ${state.epoch}`;
    document.getElementById("mode").textContent = state.read_only ? "read-only" : "writer";
    document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
    document.body.dataset.epoch = state.epoch;
    drawGraph(state);
    drawViews(state);
    drawPlots(state);
  } catch (err) {
    document.getElementById("updated").textContent = `update failed: ${err}`;
  }
}

async function refreshJobs() {
  try { drawJobs(await (await fetch("/api/jobs")).json()); } catch (err) { /* the next poll tries again */ }
}

refreshState();
refreshJobs();
setInterval(refreshState, 2000);
setInterval(refreshJobs, 1000);
