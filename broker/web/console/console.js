// The pulsar-grpc console: polls the broker's admin REST API (GET calls only) and draws what
// it answers. Every name from the broker goes into the page as text (textContent), never as
// markup: topic names are chosen by users.
"use strict";

const TOKEN_KEY = "pulsar-grpc-console-token";
const SAMPLES = 60; // points in a topic's rate chart
const REFRESH_MS = Number(document.querySelector('meta[name="refresh-ms"]').content) || 2000;

// topic full name -> [{in, out}], the last SAMPLES rates seen
const history = new Map();

class Refused extends Error {
  constructor(status, reason, path) {
    super(reason);
    this.status = status;
    this.path = path;
  }
}

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

async function get(path) {
  const headers = { Accept: "application/json" };
  if (token()) headers.Authorization = "Bearer " + token();
  const response = await fetch(path, { headers, cache: "no-store", redirect: "follow" });
  const text = await response.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch (_) {
    body = text;
  }
  if (!response.ok) {
    const reason = body && body.reason ? body.reason : response.statusText;
    throw new Refused(response.status, reason, path);
  }
  return body;
}

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = String(text);
  return node;
}

function fmtRate(value) {
  return (Number(value) || 0).toFixed(1);
}

function fmtBytes(value) {
  let n = Number(value) || 0;
  for (const unit of ["B", "KiB", "MiB", "GiB"]) {
    if (n < 1024 || unit === "GiB") return (unit === "B" ? n : n.toFixed(1)) + " " + unit;
    n /= 1024;
  }
  return String(n);
}

function figure(parent, className, label, value) {
  const span = el("span", className);
  span.append(el("b", null, label + ": "), el("span", "value", value));
  parent.append(span);
}

function table(headings, rows) {
  const t = el("table");
  const head = el("tr");
  for (const h of headings) head.append(el("th", null, h));
  t.append(head);
  for (const row of rows) {
    const tr = el("tr");
    for (const cell of row) tr.append(el("td", null, cell));
    t.append(tr);
  }
  return t;
}

function path(...parts) {
  return parts.map(encodeURIComponent).join("/");
}

// ------------------------------------------------------------------ topics

function remember(topic, stats) {
  const samples = history.get(topic) || [];
  samples.push({ in: Number(stats.msgRateIn) || 0, out: Number(stats.msgRateOut) || 0 });
  while (samples.length > SAMPLES) samples.shift();
  history.set(topic, samples);
  return samples;
}

function chart(samples) {
  const canvas = el("canvas", "chart");
  canvas.width = 320;
  canvas.height = 70;
  canvas.dataset.samples = String(samples.length);
  canvas.title = "msgRateIn (blue) and msgRateOut (orange), last " + SAMPLES + " refreshes";
  const ctx = canvas.getContext("2d");
  const top = Math.max(1, ...samples.map((s) => Math.max(s.in, s.out)));
  const step = canvas.width / (SAMPLES - 1);
  for (const [key, colour] of [["in", "#2a6fdb"], ["out", "#e08a1e"]]) {
    ctx.beginPath();
    ctx.strokeStyle = colour;
    ctx.lineWidth = 1.5;
    samples.forEach((s, i) => {
      const x = (SAMPLES - samples.length + i) * step;
      const y = canvas.height - 4 - (s[key] / top) * (canvas.height - 8);
      if (i === 0) ctx.moveTo(x, y);
      else ctx.lineTo(x, y);
    });
    ctx.stroke();
  }
  ctx.fillStyle = "#667";
  ctx.font = "10px sans-serif";
  ctx.fillText(fmtRate(top) + " msg/s", 4, 11);
  return canvas;
}

function topicBox(topic, stats) {
  const box = el("div", "topic");
  box.dataset.topic = topic;
  box.append(el("div", "topic-name", topic));
  const subs = Object.entries(stats.subscriptions || {});
  const figures = el("div", "figures");
  figure(figures, "rate-in", "msgRateIn", fmtRate(stats.msgRateIn));
  figure(figures, "rate-out", "msgRateOut", fmtRate(stats.msgRateOut));
  figure(figures, "throughput-in", "msgThroughputIn", fmtBytes(stats.msgThroughputIn) + "/s");
  figure(figures, "throughput-out", "msgThroughputOut", fmtBytes(stats.msgThroughputOut) + "/s");
  const backlog = subs.reduce((n, [, s]) => n + (Number(s.msgBacklog) || 0), 0);
  figure(figures, "backlog", "msgBacklog", backlog);
  figure(figures, "backlog-size", "backlogSize", fmtBytes(stats.backlogSize));
  figure(figures, "storage", "storageSize", fmtBytes(stats.storageSize));
  box.append(figures, chart(remember(topic, stats)));
  const publishers = stats.publishers || [];
  if (publishers.length) {
    box.append(
      table(
        ["producer", "address", "msgRateIn", "msgThroughputIn"],
        publishers.map((p) => [
          p.producerName,
          p.address || "",
          fmtRate(p.msgRateIn),
          fmtBytes(p.msgThroughputIn) + "/s",
        ]),
      ),
    );
  }
  if (subs.length) {
    const rows = [];
    for (const [name, s] of subs) {
      const consumers = s.consumers || [];
      const names = consumers.map((c) => c.consumerName || "?").join(", ");
      rows.push([name, s.type || "", s.msgBacklog, fmtRate(s.msgRateOut), consumers.length, names]);
    }
    box.append(
      table(["subscription", "type", "msgBacklog", "msgRateOut", "consumers", "names"], rows),
    );
  }
  return box;
}

async function topicView(topic) {
  const [, , tenant, namespace, local] = topic.split("/");
  try {
    // the console's own path: the admin API's answers 307 to the owner, another origin
    const stats = await get("/console/api/persistent/" + path(tenant, namespace, local) + "/stats");
    return topicBox(topic, stats);
  } catch (error) {
    const box = el("div", "topic");
    box.dataset.topic = topic;
    box.append(el("div", "topic-name", topic), el("div", "error", describe(error)));
    return box;
  }
}

async function namespaceView(namespace) {
  const [tenant, local] = namespace.split("/");
  const box = el("div", "namespace");
  box.dataset.namespace = namespace;
  box.append(el("h4", null, namespace));
  const topics = (await get("/admin/v2/persistent/" + path(tenant, local))).slice().sort();
  if (!topics.length) box.append(el("p", "empty", "no topics"));
  for (const view of await Promise.all(topics.map(topicView))) box.append(view);
  return box;
}

async function tenantView(tenant) {
  const box = el("div", "tenant");
  box.dataset.tenant = tenant;
  box.append(el("h3", null, tenant));
  const namespaces = (await get("/admin/v2/namespaces/" + path(tenant))).slice().sort();
  if (!namespaces.length) box.append(el("p", "empty", "no namespaces"));
  for (const view of await Promise.all(namespaces.map(namespaceView))) box.append(view);
  return box;
}

// ------------------------------------------------------------------ brokers

function usage(report, name) {
  const u = report[name];
  if (!u || !u.limit) return "n/a";
  return ((100 * u.usage) / u.limit).toFixed(1) + " %";
}

function brokerBox(id, report) {
  const box = el("div", "broker");
  box.dataset.broker = id;
  box.append(el("div", "topic-name", id));
  const figures = el("div", "figures");
  figure(figures, "cpu", "cpu", usage(report, "cpu"));
  figure(figures, "memory", "memory", usage(report, "memory"));
  figure(figures, "bandwidth-in", "bandwidthIn", usage(report, "bandwidthIn"));
  figure(figures, "bandwidth-out", "bandwidthOut", usage(report, "bandwidthOut"));
  figure(figures, "rate-in", "msgRateIn", fmtRate(report.msgRateIn));
  figure(figures, "rate-out", "msgRateOut", fmtRate(report.msgRateOut));
  figure(figures, "topics", "topics", report.numTopics);
  figure(figures, "producers", "producers", report.numProducers);
  figure(figures, "consumers", "consumers", report.numConsumers);
  box.append(figures);
  const bundles = report.bundles || [];
  box.append(el("div", "bundles-title", "bundles owned (" + bundles.length + ")"));
  if (bundles.length) box.append(table(["bundle"], bundles.map((b) => [b])));
  return box;
}

async function brokersView() {
  const reports = await get("/admin/v2/broker-stats/load-reports");
  const ids = Object.keys(reports || {}).sort();
  if (!ids.length) return [el("p", "empty", "a standalone broker: it owns every bundle")];
  return ids.map((id) => brokerBox(id, reports[id]));
}

// ------------------------------------------------------------------ refresh

function describe(error) {
  if (error instanceof Refused) {
    const what = error.status === 401 ? "not authenticated" : error.status === 403 ? "not allowed" : "failed";
    return "The broker answered " + error.status + " (" + what + ") to " + error.path + ": " + error.message;
  }
  return "The broker could not be reached: " + error.message;
}

function showMessage(text) {
  const message = document.getElementById("message");
  message.textContent = text;
  message.hidden = !text;
}

async function refresh() {
  const status = document.getElementById("status");
  try {
    const [brokers, tenants] = await Promise.all([
      brokersView(),
      get("/admin/v2/tenants").then((names) => Promise.all(names.slice().sort().map(tenantView))),
    ]);
    document.getElementById("brokers").replaceChildren(...brokers);
    document.getElementById("tenants").replaceChildren(...tenants);
    showMessage("");
    status.textContent = "updated " + new Date().toLocaleTimeString() + ", every " + REFRESH_MS / 1000 + " s";
  } catch (error) {
    document.getElementById("brokers").replaceChildren();
    document.getElementById("tenants").replaceChildren();
    let text = describe(error);
    if (error instanceof Refused && (error.status === 401 || error.status === 403)) {
      text += token() ? "\nThe token given is refused: paste another one." : "\nPaste a token above.";
    }
    showMessage(text);
    status.textContent = "refused at " + new Date().toLocaleTimeString();
  } finally {
    setTimeout(refresh, REFRESH_MS);
  }
}

function setUp() {
  const input = document.getElementById("token");
  input.value = token();
  document.getElementById("auth").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
  });
  document.getElementById("clear-token").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    input.value = "";
  });
  refresh();
}

setUp();
