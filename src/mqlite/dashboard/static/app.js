// The mqlite dashboard: one page, hash routes, plain JavaScript (no build step, no framework).
//
// Every view fetches the dashboard's JSON API (docs/dashboard.md), builds its DOM once and updates it
// in place on each live refresh (every 2 s while the tab is visible); charts are uPlot instances whose
// data is replaced with setData. Text from the store only ever reaches the page through textContent
// or text nodes (never innerHTML), and every API error lands in the banner, never in the console.
"use strict";

(() => {
  const REFRESH_MS = 2000;
  const view = document.getElementById("view");
  const liveToggle = document.getElementById("live-toggle");
  /** The uPlot instances on the page by chart id: the browser tests read their data here. */
  const charts = {};
  window.mqlite = { charts, ticks: 0 };

  // ---------------------------------------------------------------- DOM helpers

  /** An element with attributes (on* are listeners, testid is data-testid) and children (text is text). */
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else if (k === "class") el.className = v;
      else if (k === "testid") el.dataset.testid = v;
      else if (k === "dataset") Object.assign(el.dataset, v);
      else if (k === "checked" || k === "disabled" || k === "value") el[k] = v;
      else el.setAttribute(k, v === true ? "" : String(v));
    }
    put(el, children);
    return el;
  }

  function put(el, ...children) {
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  /** Replace an element's children (nulls and falses skipped, as in h). */
  function fill(el, ...children) {
    el.replaceChildren();
    return put(el, ...children);
  }

  /** A link inside the page: `parts` are path segments, encoded here. */
  function link(text, parts, query, attrs) {
    let href = "#/" + parts.map(encodeURIComponent).join("/");
    if (query) href += "?" + new URLSearchParams(query).toString();
    return h("a", { href, ...attrs }, text);
  }

  const nf = new Intl.NumberFormat();
  const fmtNum = (v) => (v === null || v === undefined ? "—" : nf.format(v));
  function fmtRate(v) {
    if (v === null || v === undefined) return "—";
    if (v === 0) return "0";
    return v < 10 ? v.toFixed(2) : v < 100 ? v.toFixed(1) : nf.format(Math.round(v));
  }
  function fmtBytes(b) {
    if (b === null || b === undefined) return "—";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (b >= 1024 && i < units.length - 1) { b /= 1024; i++; }
    return (i === 0 ? String(b) : b.toFixed(b < 10 ? 2 : 1)) + " " + units[i];
  }
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  /** Epoch ms as local "YYYY-MM-DD HH:MM:SS.mmm"; 0 and null (never) as a dash. */
  function fmtTime(ms) {
    if (!ms) return "—";
    const d = new Date(ms);
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
      `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
  }
  /** Epoch ms as a datetime-local input's value (local time, seconds). */
  function localInput(ms) {
    const d = new Date(ms);
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T` +
      `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }
  function fmtValue(key, v) {
    if (v === null || v === undefined) return "—";
    if (typeof v === "boolean") return v ? "yes" : "no";
    if (typeof v === "number" && /(time|timestamp|time_ms)$/i.test(key)) return fmtTime(v);  // 0: never, a dash
    if (typeof v === "object") return JSON.stringify(v);
    return typeof v === "number" ? fmtNum(v) : String(v);
  }

  function badge(text, kind) { return h("span", { class: `badge badge-${kind}` }, text); }
  const kindBadge = (kind) => badge(kind, kind);

  /** Label/value pairs as a description list. */
  function facts(testid, pairs) {
    const dl = h("dl", { class: "facts", testid });
    for (const [label, value, id] of pairs) {
      dl.append(h("div", {}, h("dt", {}, label), h("dd", { testid: id }, value)));
    }
    return dl;
  }

  /**
   * A table with headers; `columns` are {label, num?, cell(row) -> node|text}. `set(rows)` replaces
   * the body (rows get data-* from `rowData(row)`), so a refresh redraws it in place.
   */
  function table(testid, caption, columns, rowData, empty) {
    const tbody = h("tbody");
    const el = h("table", { testid },
      caption ? h("caption", {}, caption) : null,
      h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col", class: c.num ? "num" : null }, c.label)))),
      tbody);
    function set(rows) {
      const trs = rows.map((row) => h("tr", { dataset: rowData ? rowData(row) : {} },
        columns.map((c) => h("td", { class: c.num ? "num" : null }, c.cell(row)))));
      if (!trs.length) trs.push(h("tr", { class: "empty" }, h("td", { colspan: columns.length }, empty || "Nothing here.")));
      tbody.replaceChildren(...trs);
    }
    return { el, set };
  }

  function section(title, ...children) {
    return h("section", { class: "panel" }, title ? h("h2", {}, title) : null, ...children);
  }

  // ---------------------------------------------------------------- API, errors

  class ApiError extends Error {
    constructor(message, kind, status) { super(message); this.kind = kind; this.status = status; }
  }

  /** GET (or POST with a JSON body) one API path; non-2xx answers become ApiError with the server's message. */
  async function api(path, body) {
    const init = { headers: { Accept: "application/json" } };
    if (body !== undefined) {
      init.method = "POST";
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(path, init);
    } catch (e) {
      throw new ApiError(`the dashboard server did not answer (${e.message}): is mqlite dashboard still running?`, "NetworkError", 0);
    }
    const text = await resp.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
    if (!resp.ok) {
      const message = (data && data.error) || `${resp.status} ${resp.statusText}`;
      throw new ApiError(message, (data && data.kind) || "HTTPError", resp.status);
    }
    if (data === null) throw new ApiError(`${path} answered something that is not JSON`, "BadResponse", resp.status);
    return data;
  }

  const banner = document.getElementById("banner");
  /** Show an error in the banner; a sticky one (from an action) stays until dismissed or the page changes. */
  function showError(err, sticky) {
    const text = err instanceof ApiError
      ? `${err.message} (${err.kind}${err.status ? ", HTTP " + err.status : ""})`
      : `${(err && err.message) || err}`;
    document.getElementById("banner-text").textContent = text;
    banner.hidden = false;
    if (sticky) banner.dataset.sticky = "1"; else delete banner.dataset.sticky;
  }
  function clearError() { banner.hidden = true; delete banner.dataset.sticky; }
  document.getElementById("banner-close").addEventListener("click", clearError);
  // A bug of ours should still reach the banner rather than the console.
  window.addEventListener("unhandledrejection", (e) => { e.preventDefault(); showError(e.reason); });

  /** The page's one confirmation dialog: resolves true when the user chose the write button. */
  function confirmWrite(title, body, okLabel) {
    const dialog = document.getElementById("confirm");
    document.getElementById("confirm-title").textContent = title;
    fill(document.getElementById("confirm-body"), body);
    dialog.querySelector("[value=ok]").textContent = okLabel;
    dialog.returnValue = "";
    dialog.showModal();
    return new Promise((resolve) => dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true }));
  }

  // ---------------------------------------------------------------- charts

  const PALETTE = ["#2f6fdf", "#e0772c", "#2c9f5a", "#b9408d", "#7a5bd6", "#c9a227", "#1b9aaa", "#d64545"];

  /** A live time chart: `set(t_ms, series)` replaces its data in place (a new chart only when the series change). */
  class TimeChart {
    /** `fromZero`: the y axis starts at 0 (a lag chart), rather than at the data's minimum. */
    constructor(id, unit, formatter, fromZero) {
      this.id = id;
      this.unit = unit;
      this.fmt = formatter;
      this.fromZero = !!fromZero;
      // No role=img: that would hide uPlot's legend (series names and values) from screen readers;
      // the summary line below says the latest values in words.
      this.host = h("div", { class: "chart", id: `chart-${id}`, testid: `chart-${id}` });
      this.plot = null;
      this.names = null;
      this.empty = h("p", { class: "chart-empty muted", testid: "chart-waiting", hidden: true }, "Waiting for samples…");
      this.summary = h("p", { class: "visually-hidden", testid: "chart-summary", "aria-live": "off" });
      this.host.append(this.empty, this.summary);
    }

    set(tMs, series) {
      const data = [tMs.map((t) => t / 1000), ...series.map((s) => s.values)];
      const names = series.map((s) => s.label).join("\u0000");
      // A line needs two points: with fewer, uPlot would draw an empty axis spanning years.
      const waiting = tMs.length < 2 || !series.some((s) => s.values.some((v) => v !== null && v !== undefined));
      this.empty.hidden = !waiting;
      this.host.classList.toggle("waiting", waiting);
      this.summary.textContent = waiting ? `${this.unit}: waiting for samples.` : `${this.unit}, latest: ` +
        series.map((s) => `${s.label} ${this.fmt(s.values.at(-1))}`).join(", ") + ".";
      if (this.plot && names === this.names) { this.plot.setData(data); return; }
      this.destroy();
      this.names = names;
      const css = getComputedStyle(document.documentElement);
      const fg = css.getPropertyValue("--muted").trim() || "#555";
      const grid = css.getPropertyValue("--grid").trim() || "#e5e5e5";
      const axis = { stroke: fg, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
      const fmt = this.fmt;
      const opts = {
        width: Math.max(this.host.clientWidth, 320),
        height: 220,
        scales: { x: { time: true }, ...(this.fromZero ? { y: { range: (u, min, max) => [0, Math.max(max, 1)] } } : {}) },
        series: [{}, ...series.map((s, i) => ({
          label: s.label,
          stroke: PALETTE[i % PALETTE.length],
          fill: series.length === 1 ? PALETTE[0] + "22" : undefined,
          width: 2,
          points: { show: false },
          value: (u, v) => (v === null || v === undefined ? "—" : fmt(v)),
        }))],
        axes: [axis, { ...axis, size: 64, values: (u, vals) => vals.map(fmt), label: this.unit, labelSize: 18 }],
        legend: { live: true },
      };
      this.plot = new uPlot(opts, data, this.host);
      charts[this.id] = this.plot;
    }

    resize() {
      if (this.plot && this.host.clientWidth) this.plot.setSize({ width: this.host.clientWidth, height: 220 });
    }

    destroy() {
      if (!this.plot) return;
      this.plot.destroy();
      this.plot = null;
      delete charts[this.id];
    }
  }

  window.mqlite.TimeChart = TimeChart;  // for the browser tests' one-sample case

  // ---------------------------------------------------------------- views

  let topicNames = [];
  /** The store's mode from the latest overview ("writer", "read-only", "remote"). */
  let storeMode = null;
  /** Settles once the page's first overview request has set the store line and `storeMode`. */
  let storeReady = Promise.resolve();
  let showSystem = false;

  function setStoreLine(store) {
    const where = store.path || store.address || "";
    const mode = store.mode === "writer" ? "writer" : store.mode === "remote" ? "remote" : "read-only";
    storeMode = mode;
    fill(document.getElementById("store-line"),
      h("span", { class: "where", title: where }, where), " ",
      badge(mode, store.writable ? "writable" : "readonly"), " ",
      h("span", { class: "muted" }, store.flush_disk_type || ""));
  }

  /**
   * What the store's last shutdown means: `clean_shutdown` false says a writer did not shut down
   * cleanly; a writer recovers the store when it opens, so with a live writer (`writer_alive`: this
   * dashboard's, or another process') that has happened, and without one it has not yet.
   */
  function shutdownText(clean, mode, writerAlive) {
    if (clean === null || clean === undefined) return "Shutdown state unknown.";
    if (clean) return "The last writer shut down cleanly.";
    if (mode === "writer") return "The writer before this one did not shut down cleanly: this dashboard's writer recovered the store when it opened it.";
    if (writerAlive) return "The writer before the one that holds the store now did not shut down cleanly: that writer recovered the store when it opened it.";
    return "The last writer did not shut down cleanly, and no writer has opened the store since: recovery runs when a writer next opens it.";
  }

  function overviewView(ctx) {
    const chart = new TimeChart("overview-rates", "msg/s", fmtRate);
    const totals = h("div");
    const health = h("div", { testid: "overview-health" });
    const toggle = h("input", { type: "checkbox", id: "show-system", testid: "show-system", checked: showSystem });
    const topics = table("topics-table", null, [
      { label: "Topic", cell: (t) => link(t.topic, ["topic", t.topic]) },
      { label: "Kind", cell: (t) => kindBadge(t.kind) },
      { label: "Queues", num: true, cell: (t) => fmtNum(t.queues) },
      { label: "Messages", num: true, cell: (t) => fmtNum(t.messages) },
      { label: "Max offsets", num: true, cell: (t) => fmtNum(t.max_offset_sum) },
      { label: "Last stored", cell: (t) => fmtTime(t.last_store_time) },
      { label: "In/s", num: true, cell: (t) => fmtRate(t.in_per_s) },
    ], (t) => ({ topic: t.topic, kind: t.kind }), "No topics yet.");
    let last = null;
    const drawTopics = () => last && topics.set(last.topics.filter((t) => showSystem || t.kind !== "system"));
    toggle.addEventListener("change", () => { showSystem = toggle.checked; drawTopics(); });
    put(ctx.root,
      h("h1", {}, "Overview"), totals,
      section("Messages per second", chart.host),
      section("Health", health),
      section("Topics", h("label", { class: "inline" }, toggle, " Show system topics"), topics.el));
    return {
      charts: [chart],
      async refresh() {
        const d = await api("api/overview");
        if (!ctx.alive()) return;
        last = d;
        setStoreLine(d.store);
        topicNames = d.topics.map((t) => t.topic);
        const t = d.totals;
        fill(totals, facts("totals", [
          ["Topics", fmtNum(t.topics), "total-topics"], ["Queues", fmtNum(t.queues), "total-queues"],
          ["Messages", fmtNum(t.messages), "total-messages"], ["Disk", fmtBytes(t.disk_bytes), "total-disk"],
          ["In/s", fmtRate(t.in_per_s), "total-in"], ["Out/s", fmtRate(t.out_per_s), "total-out"],
          ["Health", badge(d.health.status, d.health.status), "total-health"],
        ]));
        fill(health,
          h("p", {}, badge(d.health.status, d.health.status), " ",
            shutdownText(d.health.clean_shutdown, d.store.mode, d.health.writer_alive),
            " ", link("Store health", ["health"])),
          (d.health.notes || []).length ? h("ul", {}, d.health.notes.map((n) => h("li", {}, n))) : null);
        chart.set(d.history.t, [{ label: "in", values: d.history.in_per_s }, { label: "out", values: d.history.out_per_s }]);
        drawTopics();
      },
    };
  }

  function topicView(ctx, name) {
    const chart = new TimeChart("topic-rate", "msg/s", fmtRate);
    const head = h("div");
    const queues = table("queues-table", null, [
      { label: "Queue", num: true, cell: (q) => q.queue_id },
      { label: "Min offset", num: true, cell: (q) => fmtNum(q.min_offset) },
      { label: "Max offset", num: true, cell: (q) => fmtNum(q.max_offset) },
      { label: "Messages", num: true, cell: (q) => fmtNum(q.max_offset - q.min_offset) },
      { label: "Last stored", cell: (q) => fmtTime(q.last_store_time) },
      { label: "", cell: (q) => (q.max_offset > q.min_offset ? link("last message", ["search"], { mode: "offset", topic: name, queue_id: q.queue_id, offset: q.max_offset - 1 }) : "") },
    ], (q) => ({ queue: q.queue_id }), "No queues.");
    put(ctx.root, h("h1", {}, "Topic ", h("code", {}, name)), head,
      section("Messages in per second", chart.host), section("Queues", queues.el));
    return {
      charts: [chart],
      async refresh() {
        const d = await api("api/topics/" + encodeURIComponent(name));
        if (!ctx.alive()) return;
        const stored = d.queues.reduce((s, q) => s + q.max_offset - q.min_offset, 0);
        fill(head, facts("topic-facts", [
          ["Kind", kindBadge(d.kind)],
          ["Read / write queues", d.read_queues === null ? "not in the topic table" : `${d.read_queues} / ${d.write_queues}`],
          ["Permission", permission(d.perm)], ["Messages", fmtNum(stored), "topic-messages"],
          ["Groups", d.groups.length ? d.groups.map((g, i) => [i ? ", " : "", link(g, ["group", g])]) : "none"],
          ["Find", [link("by key or time", ["search"], { topic: name })]],
        ]));
        chart.set(d.history.t, [{ label: "in", values: d.history.in_per_s }]);
        queues.set(d.queues);
      },
    };
  }

  /** RocketMQ's PermName bits: 4 read, 2 write, 1 inherit. */
  function permission(perm) {
    if (perm === null || perm === undefined) return "—";
    const names = [[4, "read"], [2, "write"], [1, "inherit"]].filter(([bit]) => perm & bit).map(([, n]) => n);
    return `${names.join(", ") || "none"} (${perm})`;
  }

  function membersList(members) {
    if (members === null || members === undefined) {
      return h("span", { class: "muted" }, "not known from a store directory (members show over -n)");
    }
    return members.length ? h("ul", { class: "plain" }, members.map((m) => h("li", {}, h("code", {}, typeof m === "string" ? m : JSON.stringify(m))))) : "none";
  }

  function groupsView(ctx) {
    const groups = table("groups-table", null, [
      { label: "Group", cell: (g) => link(g.group, ["group", g.group]) },
      { label: "Topics", cell: (g) => g.topics.map((t, i) => [i ? ", " : "", link(t, ["topic", t])]) },
      { label: "Lag", num: true, cell: (g) => fmtNum(g.lag) },
      { label: "Out/s", num: true, cell: (g) => fmtRate(g.out_per_s) },
      { label: "Members", num: true, cell: (g) => (g.members === null ? "—" : fmtNum(g.members.length)) },
      { label: "Dead letters", num: true, cell: (g) => (g.dlq ? link(fmtNum(g.dlq), ["dlq", g.group]) : "0") },
    ], (g) => ({ group: g.group }), "No consumer groups have committed offsets yet.");
    put(ctx.root, h("h1", {}, "Consumer groups"), section(null, groups.el));
    return {
      async refresh() {
        const d = await api("api/groups");
        if (ctx.alive()) groups.set(d.groups);
      },
    };
  }

  /** A group's queue without a committed offset: why its consumer offset is a dash and what its lag counts. */
  const NO_OFFSET = "No committed offset: the lag here counts this queue from offset 0 (as mqadmin's consumerProgress); " +
    "/metrics counts no lag for it (as RocketMQ's ConsumerLagCalculator).";

  function groupView(ctx, name) {
    const chart = new TimeChart("group-lag", "messages behind", fmtNum, true);
    chart.host.dataset.testid = "lag-chart";
    const head = h("div");
    const queues = table("lag-table", null, [
      { label: "Topic", cell: (q) => link(q.topic, ["topic", q.topic]) },
      { label: "Queue", num: true, cell: (q) => q.queue_id },
      { label: "Broker offset", num: true, cell: (q) => fmtNum(q.broker_offset) },
      { label: "Consumer offset", num: true, cell: (q) => (q.committed === false ? h("span", { title: NO_OFFSET }, "—") : fmtNum(q.consumer_offset)) },
      { label: "Lag", num: true, cell: (q) => h("span", { class: q.lag > 0 ? "behind" : null }, fmtNum(q.lag)) },
      { label: "Client", cell: (q) => (q.client_id ? h("code", {}, q.client_id) : "—") },
      { label: "Last consumed message stored", cell: (q) => fmtTime(q.last_timestamp) },
    ], (q) => ({ topic: q.topic, queue: q.queue_id, lag: q.lag, committed: q.committed }), "This group has no committed offsets.");
    put(ctx.root, h("h1", {}, "Group ", h("code", {}, name)), head,
      section("Lag over time", chart.host), section("Lag per queue", queues.el));
    return {
      charts: [chart],
      async refresh() {
        const d = await api("api/groups/" + encodeURIComponent(name));
        if (!ctx.alive()) return;
        fill(head, facts("group-facts", [
          ["Lag", fmtNum(d.lag), "group-lag"], ["Members", membersList(d.members)],
          ["Dead letters", link("%DLQ%" + name, ["dlq", name])],
        ]));
        const byTopic = Object.entries(d.history.by_topic || {});
        const series = byTopic.length === 1 ? [{ label: byTopic[0][0], values: byTopic[0][1] }]
          : [{ label: "total", values: d.history.lag }, ...byTopic.map(([t, v]) => ({ label: t, values: v }))];
        chart.set(d.history.t, series);
        queues.set(d.queues);
      },
    };
  }

  const SEARCHES = [
    { mode: "key", title: "By key", fields: [["topic", "Topic"], ["key", "Key"]] },
    { mode: "msg_id", title: "By message id", fields: [["msg_id", "msg_id (UNIQ_KEY)"]] },
    { mode: "offset_msg_id", title: "By offset message id", fields: [["offset_msg_id", "offset_msg_id"]] },
    { mode: "offset", title: "By queue and offset", fields: [["topic", "Topic"], ["queue_id", "Queue id", "number"], ["offset", "Queue offset", "number"]] },
    { mode: "time", title: "By time range", fields: [["topic", "Topic"], ["begin", "From", "datetime-local"], ["end", "To", "datetime-local"]] },
  ];

  /** The API query of a search route's parameters (times from the inputs' local time to epoch ms). */
  function searchQuery(p) {
    const spec = SEARCHES.find((s) => s.mode === p.get("mode"));
    if (!spec) return null;
    const q = new URLSearchParams();
    for (const [name] of spec.fields) {
      const v = (p.get(name) || "").trim();
      if (!v) throw new Error(`${spec.title.toLowerCase()}: fill in ${name}`);
      q.set(name, spec.mode === "time" && name !== "topic" ? String(new Date(v).getTime()) : v);
    }
    q.set("limit", p.get("limit") || "100");
    return q;
  }

  function searchView(ctx) {
    const p = ctx.params;
    const datalist = h("datalist", { id: "topic-names" }, topicNames.map((t) => h("option", { value: t })));
    const now = Date.now();
    const defaults = { begin: localInput(now - 3600e3), end: localInput(now + 60e3) };
    const forms = SEARCHES.map((spec) => {
      const form = h("form", { class: "search", testid: `search-${spec.mode}`, "aria-label": spec.title },
        h("h2", {}, spec.title),
        spec.fields.map(([name, label, type]) => h("label", {}, label, h("input", {
          name, type: type || "text", required: true, step: type === "datetime-local" ? 1 : null,
          min: type === "number" ? 0 : null, list: name === "topic" ? "topic-names" : null,
          value: p.get(name) || defaults[name] || "",
          spellcheck: "false", autocomplete: "off",
        }))),
        h("button", { type: "submit", class: "primary" }, "Search"));
      form.addEventListener("submit", (e) => {
        e.preventDefault();
        const q = new URLSearchParams({ mode: spec.mode });
        for (const [name, value] of new FormData(form)) q.set(name, value);
        const hash = "#/search?" + q.toString();
        if (location.hash === hash) route(); else location.hash = hash;
      });
      return form;
    });
    const results = table("search-results", null, [
      { label: "msg_id", cell: (m) => link(m.msg_id, ["message", m.offset_msg_id], { by: "offset_msg_id" }, { class: "mono" }) },
      { label: "Topic", cell: (m) => link(m.topic, ["topic", m.topic]) },
      { label: "Queue", num: true, cell: (m) => m.queue_id },
      { label: "Offset", num: true, cell: (m) => fmtNum(m.queue_offset) },
      { label: "Tags", cell: (m) => m.tags || "" },
      { label: "Keys", cell: (m) => (m.keys || []).join(" ") },
      { label: "Stored", cell: (m) => fmtTime(m.store_timestamp) },
      { label: "Size", num: true, cell: (m) => fmtBytes(m.body_size) },
      { label: "Retries", num: true, cell: (m) => fmtNum(m.reconsume_times) },
    ], (m) => ({ msgId: m.msg_id, offsetMsgId: m.offset_msg_id }), "No message matches.");
    const note = h("p", { class: "muted", testid: "search-note" });
    const out = section("Results", note, results.el);
    out.hidden = true;
    put(ctx.root, h("h1", {}, "Find messages"), datalist, h("div", { class: "search-grid" }, forms), out);
    return {
      live: false,
      async refresh() {
        const q = searchQuery(p);
        if (!q) return;
        const d = await api("api/messages?" + q.toString());
        if (!ctx.alive()) return;
        out.hidden = false;
        note.textContent = `${d.messages.length} message${d.messages.length === 1 ? "" : "s"}` +
          (d.truncated ? ` (the first ${d.messages.length}: narrow the search to see the rest)` : "");
        results.set(d.messages);
      },
    };
  }

  /** Hex dump lines: offset, 16 bytes, their ASCII. */
  function hexDump(hex) {
    const lines = [];
    for (let i = 0; i < hex.length; i += 32) {
      const chunk = hex.slice(i, i + 32);
      const bytes = chunk.match(/../g) || [];
      const ascii = bytes.map((b) => { const c = parseInt(b, 16); return c >= 32 && c < 127 ? String.fromCharCode(c) : "."; }).join("");
      lines.push(`${(i / 2).toString(16).padStart(8, "0")}  ${bytes.join(" ").padEnd(47)}  ${ascii}`);
    }
    return lines.join("\n");
  }

  function messageView(ctx, id) {
    const by = ctx.params.get("by") === "offset_msg_id" ? "offset_msg_id" : "msg_id";
    return {
      live: false,
      async refresh() {
        const m = await api(`api/message?${by}=${encodeURIComponent(id)}`);
        if (!ctx.alive()) return;
        const keys = m.keys || [];
        const headers = facts("message-headers", [
          ["Topic", link(m.topic, ["topic", m.topic]), "message-topic"], ["Queue", `${m.queue_id} at offset ${fmtNum(m.queue_offset)}`],
          ["msg_id", h("code", {}, m.msg_id)], ["offset_msg_id", h("code", {}, m.offset_msg_id)],
          ["Tags", m.tags || "—"],
          ["Keys", keys.length ? keys.map((k, i) => [i ? " " : "", link(k, ["search"], { mode: "key", topic: m.topic, key: k })]) : "—"],
          ["Born", `${fmtTime(m.born_timestamp)} at ${m.born_host}`], ["Stored", `${fmtTime(m.store_timestamp)} at ${m.store_host}`],
          ["Commit log offset", fmtNum(m.commit_log_offset)], ["Body", `${fmtBytes(m.body_size)}, CRC ${m.body_crc}`],
          ["System flag", String(m.sys_flag)], ["Reconsume times", fmtNum(m.reconsume_times)],
        ]);
        const props = table("properties-table", null, [
          { label: "Property", cell: ([k]) => h("code", {}, k) }, { label: "Value", cell: ([, v]) => v },
        ], ([k]) => ({ property: k }), "No properties.");
        props.set(Object.entries(m.properties || {}).sort(([a], [b]) => a.localeCompare(b)));
        const body = h("pre", { class: "body", testid: "message-body", tabindex: 0 });
        const textButton = h("button", { type: "button", testid: "body-text", disabled: m.body_text === null }, "Text");
        const hexButton = h("button", { type: "button", testid: "body-hex" }, "Hex");
        const show = (mode) => {
          body.textContent = mode === "text" ? m.body_text : hexDump(m.body_hex);
          body.dataset.mode = mode;
          textButton.setAttribute("aria-pressed", String(mode === "text"));
          hexButton.setAttribute("aria-pressed", String(mode === "hex"));
        };
        textButton.addEventListener("click", () => show("text"));
        hexButton.addEventListener("click", () => show("hex"));
        show(m.body_text === null ? "hex" : "text");
        fill(ctx.root,
          h("h1", {}, "Message ", h("code", {}, m.msg_id)),
          h("p", {}, link("Trace and track per group", ["trace", m.msg_id], null, { testid: "trace-link" })),
          h("div", { class: "columns" }, section("Headers", headers), section("Properties", props.el)),
          section("Body",
            h("div", { class: "toggle", role: "group", "aria-label": "Show the body as" }, textButton, hexButton),
            m.body_text === null ? h("p", { class: "muted" }, "The body is not UTF-8 text: shown as hex.") : null,
            m.body_truncated ? h("p", { class: "muted" }, `The hex view shows the first 64 KiB of ${fmtBytes(m.body_size)}.`) : null,
            body));
      },
    };
  }

  function traceView(ctx, id) {
    const traces = table("traces-table", null, [
      { label: "Time", cell: (t) => fmtTime(t.time_stamp) },
      { label: "Type", cell: (t) => t.msg_type },
      { label: "Status", cell: (t) => t.status },
      { label: "Topic", cell: (t) => t.topic },
      { label: "Group", cell: (t) => t.group_name },
      { label: "Client", cell: (t) => t.client_host },
      { label: "Store host", cell: (t) => t.store_host },
      { label: "Cost ms", num: true, cell: (t) => fmtNum(t.cost_time) },
      { label: "Retries", num: true, cell: (t) => fmtNum(t.retry_times) },
      { label: "Result", cell: (t) => t.consume_return_type || t.transaction_state || "" },
    ], (t) => ({ type: t.msg_type }), "No trace records: producers and consumers write them with tracing on (RMQ_SYS_TRACE_TOPIC).");
    const tracks = table("tracks-table", null, [
      { label: "Consumer group", cell: (t) => link(t.consumer_group, ["group", t.consumer_group]) },
      { label: "Track", cell: (t) => String(t.track_type) },
      { label: "Note", cell: (t) => t.exception_desc || "" },
    ], (t) => ({ group: t.consumer_group }), "No group subscribes to this message's topic.");
    put(ctx.root, h("h1", {}, "Trace of ", h("code", {}, id)),
      h("p", {}, link("The message", ["message", id])),
      section("Trace", traces.el), section("Track per consumer group", tracks.el));
    return {
      live: false,
      async refresh() {
        const d = await api("api/trace?msg_id=" + encodeURIComponent(id));
        if (!ctx.alive()) return;
        traces.set(d.traces);
        tracks.set(d.tracks);
      },
    };
  }

  /** Dead letters a page shows; later pages start after the last one shown (the DLQ topic's queue offsets). */
  const DLQ_PAGE = 200;

  function dlqView(ctx, group) {
    // The selection is keyed by offset_msg_id: two dead letters share a msg_id when a re-sent message
    // dies again, and the re-send names exactly the copies that were checked (the API takes either id).
    const selected = new Map();
    let writable = false;
    let shown = [];
    let busy = false;
    const queues = table("dlq-queues", null, [
      { label: "Group", cell: (q) => link(q.group, ["dlq", q.group]) },
      { label: "Dead-letter topic", cell: (q) => link(q.topic, ["topic", q.topic]) },
      { label: "Messages", num: true, cell: (q) => fmtNum(q.messages) },
    ], (q) => ({ group: q.group }), "No dead letters: no group has a %DLQ% topic.");
    put(ctx.root, h("h1", {}, "Dead-letter queues"), section(null, queues.el));
    if (!group) {
      return {
        async refresh() {
          const d = await api("api/dlq");
          if (ctx.alive()) queues.set(d.queues);
        },
      };
    }
    const retry = "%RETRY%" + group;
    const dlq = "%DLQ%" + group;
    // The page shown: null is the oldest DLQ_PAGE; otherwise the queue offset of its first letter.
    let from = null;
    const pages = [];  // where the earlier pages started, for "Previous"
    const all = h("input", { type: "checkbox", "aria-label": "Choose all on this page", testid: "dlq-all" });
    const toOrigin = h("input", { type: "checkbox", id: "to-origin", testid: "to-origin" });
    const resend = h("button", { type: "button", class: "primary", testid: "resend-button", disabled: true }, "Resend…");
    const note = h("p", { class: "note", testid: "readonly-note", hidden: true },
      "Read-only: this dashboard does not hold the store. Start it with ", h("code", {}, "mqlite dashboard PATH --write"),
      " (or ", h("code", {}, "-n HOST:PORT"), " to a serving broker) to resend.");
    const results = h("div", { testid: "resend-results" });
    const position = h("span", { class: "muted", testid: "dlq-position" });
    const previous = h("button", { type: "button", testid: "dlq-previous", disabled: true }, "← Previous");
    const next = h("button", { type: "button", testid: "dlq-next", disabled: true }, `Next ${DLQ_PAGE} →`);
    const pager = h("div", { class: "toolbar pager", role: "group", "aria-label": "Pages of dead letters" }, previous, next, position);
    const sync = () => {
      resend.disabled = busy || !writable || selected.size === 0;
      resend.textContent = busy ? "Resending…" : selected.size ? `Resend ${selected.size}…` : "Resend…";
      all.checked = shown.length > 0 && shown.every((m) => selected.has(m.offset_msg_id));
      note.hidden = writable;
    };
    const box = (m) => h("input", {
      type: "checkbox", "aria-label": `Choose ${m.msg_id} at offset ${m.queue_offset}`,
      dataset: { msgId: m.msg_id, offsetMsgId: m.offset_msg_id }, checked: selected.has(m.offset_msg_id),
      onchange: (e) => { if (e.target.checked) selected.set(m.offset_msg_id, m); else selected.delete(m.offset_msg_id); sync(); },
    });
    const messages = table("dlq-messages", null, [
      { label: all, cell: box },
      { label: "msg_id", cell: (m) => link(m.msg_id, ["message", m.offset_msg_id], { by: "offset_msg_id" }, { class: "mono" }) },
      { label: "Origin topic", cell: (m) => m.origin_topic || "—" },
      { label: "Offset", num: true, cell: (m) => fmtNum(m.queue_offset) },
      { label: "Tags", cell: (m) => m.tags || "" },
      { label: "Keys", cell: (m) => (m.keys || []).join(" ") },
      { label: "Stored", cell: (m) => fmtTime(m.store_timestamp) },
      { label: "Retries", num: true, cell: (m) => fmtNum(m.reconsume_times) },
    ], (m) => ({ msgId: m.msg_id, offsetMsgId: m.offset_msg_id, offset: m.queue_offset }), `${dlq} is empty.`);
    all.addEventListener("change", () => {
      for (const m of shown) { if (all.checked) selected.set(m.offset_msg_id, m); else selected.delete(m.offset_msg_id); }
      messages.set(shown);
      sync();
    });
    const go = (start) => { from = start; load(); };
    next.addEventListener("click", () => {
      const last = shown.at(-1);
      pages.push(from);
      go(last.queue_offset + 1);
    });
    previous.addEventListener("click", () => go(pages.pop() || null));
    resend.addEventListener("click", async () => {
      const chosen = [...selected.values()];
      const ids = chosen.map((m) => m.offset_msg_id);
      const origin = toOrigin.checked;
      const origins = [...new Set(chosen.map((m) => m.origin_topic).filter(Boolean))];
      const ok = await confirmWrite(`Resend ${ids.length} message${ids.length === 1 ? "" : "s"}?`, [
        h("p", {}, `This writes a copy of ${ids.length === 1 ? "the chosen dead letter" : `each of the ${ids.length} chosen dead letters`} to `,
          origin ? (origins.length ? origins.map((t, i) => [i ? ", " : "", h("code", {}, t)]) : "its origin topic") : h("code", {}, retry),
          origin ? " (each message's origin topic), where the topic's subscribers get it." : ` (group ${group}'s retry topic), where that group consumes it again.`),
        h("p", {}, "The copies in ", h("code", {}, dlq), " stay: the commit log is append-only."),
        h("ul", { class: "ids" }, chosen.slice(0, 8).map((m) => h("li", {}, h("code", {}, m.msg_id), ` at offset ${fmtNum(m.queue_offset)}`)),
          chosen.length > 8 ? h("li", {}, `and ${chosen.length - 8} more`) : null),
      ], "Resend");
      if (!ok || !ctx.alive() || busy) return;
      busy = true;  // a second click while the request runs would send the copies twice
      sync();
      try {
        const d = await api(`api/dlq/${encodeURIComponent(group)}/resend`, { msg_ids: ids, to_origin: origin, confirm: true });
        if (!ctx.alive()) return;
        const t = table("resend-table", `Resent ${d.results.length}`, [
          { label: "msg_id", cell: (r) => r.msg_id },
          { label: "Written to", cell: (r) => link(r.topic, ["topic", r.topic]) },
          { label: "Queue", num: true, cell: (r) => r.queue_id },
          { label: "Offset", num: true, cell: (r) => fmtNum(r.queue_offset) },
          { label: "", cell: (r) => link("view", ["message", r.offset_msg_id], { by: "offset_msg_id" }) },
        ], (r) => ({ msgId: r.msg_id, topic: r.topic }));
        t.set(d.results);
        fill(results, t.el);
        selected.clear();
      } catch (e) {
        showError(e, true);
      } finally {
        busy = false;
        sync();
      }
      await load();
    });
    put(ctx.root, section(["Messages in ", h("code", {}, dlq)],
      h("div", { class: "toolbar" }, resend,
        h("label", { class: "inline" }, toOrigin, " to each message's origin topic instead of ", h("code", {}, retry))),
      note, pager, messages.el, results));
    async function load() {
      const want = from;
      // A later page reads the DLQ topic's queue on from the offset after the last letter shown (past the
      // newest, as when a later page emptied, the list is empty).
      const page = api(`api/dlq/${encodeURIComponent(group)}?limit=${DLQ_PAGE}` + (want === null ? "" : `&offset=${want}`));
      const [list, d] = await Promise.all([api("api/dlq"), page]);
      if (!ctx.alive() || want !== from) return;
      writable = list.writable;
      queues.set(list.queues);
      shown = d.messages;
      const total = (list.queues.find((q) => q.group === group) || {}).messages;
      const first = shown.length ? shown[0].queue_offset : null;
      position.textContent = shown.length
        ? `Dead letters at offsets ${fmtNum(first)} … ${fmtNum(shown.at(-1).queue_offset)}` + (total === undefined ? "" : ` of ${fmtNum(total)}`)
        : "";
      next.disabled = !d.truncated;
      previous.disabled = from === null;
      pager.hidden = from === null && !d.truncated;
      messages.set(shown);
      sync();
    }
    return { refresh: load };
  }

  // The recovery history's columns that matter after a crash, first; every field is under "Details".
  const RECOVERY_COLUMNS = [
    ["time_ms", "When"], ["abnormal", "Shutdown before"], ["records_scanned", "Scanned", true],
    ["records_dispatched", "Dispatched", true], ["damaged_bytes", "Damaged bytes", true], ["lost_units", "Lost units", true],
    ["lost_segments", "Lost segments", true], ["queues_repaired", "Repaired queues", true], ["duration_ms", "Took", true],
  ];
  function recoveryValue(key, r) {
    const v = r[key];
    if (key === "abnormal") return v ? badge("abnormal", "warn") : "clean";
    if (key === "queues_repaired") return fmtNum(Object.keys(v || {}).length);
    if (key === "duration_ms") return v === null || v === undefined ? "—" : `${fmtNum(v)} ms`;
    if (key === "damaged_bytes") return r.damaged_tail && v ? `${fmtNum(v)} (torn tail)` : fmtNum(v);
    return fmtValue(key, v);
  }

  function healthView(ctx) {
    const head = h("div");
    // A segment's name is its first byte's commit-log offset: what is written in it is what the commit
    // log's max offset reaches past that, up to the segment's size. The API's `bytes` is what the file
    // occupies on disk (allocated blocks: a segment is sparse until written), shown as such.
    let segmentSize = 0;
    let maxOffset = 0;
    const written = (s) => Math.min(Math.max(maxOffset - Number(s.name), 0), segmentSize);
    const segments = table("segments-table", null, [
      { label: "Segment", cell: (s) => h("code", {}, s.name) },
      { label: "Written", num: true, cell: (s) => fmtBytes(written(s)) },
      { label: "", cell: (s) => (segmentSize ? h("meter", { min: 0, max: segmentSize, value: written(s), "aria-label": `${s.name}: share written` }) : "") },
      { label: "Allocated on disk", num: true, cell: (s) => fmtBytes(s.bytes) },
    ], (s) => ({ segment: s.name, written: written(s), allocated: s.bytes }), "No commit-log segments.");
    const recovery = h("div", { testid: "recovery-history" });
    const checkpoint = h("div", { testid: "checkpoint" });
    const verifyOut = h("div", { testid: "verify-result", "aria-live": "polite" });
    const verify = h("button", { type: "button", class: "primary", testid: "verify-button" }, "Run verify");
    verify.addEventListener("click", async () => {
      verify.disabled = true;
      fill(verifyOut, h("p", { class: "muted" }, "Verifying every record, consume queue and index file…"));
      try {
        const r = await api("api/verify", {});
        if (!ctx.alive()) return;
        fill(verifyOut,
          h("p", {}, badge(r.ok ? "ok" : "problems", r.ok ? "ok" : "warn")),
          h("pre", { class: "summary", testid: "verify-summary" }, r.summary || ""),
          facts("verify-facts", [["Records", fmtNum(r.records)], ["Consume-queue units", fmtNum(r.units)],
            ["Queues", fmtNum(r.queues)], ["Index files", fmtNum(r.index_files)]]),
          r.problems.length ? h("ul", { class: "problems", testid: "verify-problems" }, r.problems.map((p) => h("li", {}, typeof p === "string" ? p : JSON.stringify(p)))) : null);
      } catch (e) {
        fill(verifyOut);
        showError(e, true);
      } finally {
        verify.disabled = false;
      }
    });
    // The file panels: hidden over -n, where the store's files are not visible.
    const files = [section("Verify", h("p", {}, "Reads every commit-log record and checks the consume queues and index against it (read-only; takes a while on a large store). "), verify, verifyOut),
      section("Commit-log segments", segments.el), section("Recovery history", recovery), section("Checkpoint", checkpoint)];
    put(ctx.root, h("h1", {}, "Store health"), head, files);
    return {
      async refresh() {
        const [d] = await Promise.all([api("api/health"), storeReady]);  // the shutdown note words by mode
        if (!ctx.alive()) return;
        const cl = d.commitlog || {};
        fill(head,
          d.available === false ? h("p", { class: "note", testid: "files-unavailable" },
            "This dashboard talks to a serving broker: the store's files are not visible from here. ",
            "Run ", h("code", {}, "mqlite verify PATH"), " and ", h("code", {}, "mqlite dashboard PATH"), " where the store is.") : null,
          d.available === false ? null : facts("health-facts", [
            ["Flush", d.flush_disk_type || "—", "flush-mode"],
            ["Last shutdown", d.clean_shutdown === null || d.clean_shutdown === undefined ? "unknown"
              : d.clean_shutdown ? "clean" : "abnormal", "last-shutdown"],
            ["Disk", fmtBytes(d.disk_bytes)], ["Commit log", `${fmtNum(cl.min_offset)} … ${fmtNum(cl.max_offset)} bytes`],
            ["Segment size", fmtBytes(cl.file_size)], ["Consume queues", fmtBytes(d.consume_queue_bytes)],
            ["Index files", Array.isArray(d.index_files) ? fmtNum(d.index_files.length) : fmtValue("index_files", d.index_files)],
          ]),
          d.available !== false && d.clean_shutdown === false
            ? h("p", { class: "note", testid: "shutdown-note" }, shutdownText(false, storeMode, d.writer_alive)) : null);
        for (const panel of files) panel.hidden = d.available === false;
        segmentSize = cl.file_size || 0;
        maxOffset = cl.max_offset || 0;
        segments.set(cl.segments || []);
        const history = d.recovery_history || [];
        const noHistory = d.recovery_history === null || d.recovery_history === undefined
          ? "Not available here (over -n the store's files are not visible)." : "No recovery recorded yet.";
        const rt = table("recovery-table", null, [...RECOVERY_COLUMNS.map(([k, label, num]) => ({ label, num, cell: (r) => recoveryValue(k, r) })),
          { label: "Details", cell: (r) => h("details", {}, h("summary", {}, "all fields"),
            facts(null, Object.entries(r).map(([k, v]) => [k, fmtValue(k, v)]))) }],
          (r) => ({ seq: r.seq }), "No recovery recorded yet.");
        rt.set(history.slice().reverse());
        fill(recovery, history.length ? rt.el : h("p", { class: "muted" }, noHistory));
        const cp = Object.entries(d.checkpoint || {});
        fill(checkpoint, cp.length ? facts("checkpoint-facts", cp.map(([k, v]) => [k, fmtValue(k, v)])) : h("p", { class: "muted" }, "—"));
      },
    };
  }

  // ---------------------------------------------------------------- router, live refresh

  /** The window's title after a view's first load: its heading, then the dashboard's name. */
  function titleAndFocus(first) {
    const heading = view.querySelector("h1");
    document.title = (heading ? heading.textContent + " · " : "") + "mqlite dashboard";
    if (!first || !heading) return;
    // A screen reader (and the keyboard) lands on the new page's heading, not where the old page was.
    heading.tabIndex = -1;
    heading.focus({ preventScroll: true });
  }

  // [path pattern, view name (data-view, for tests and CSS), nav entry lit, view]
  const ROUTES = [
    [/^\/?$/, "overview", "overview", (ctx) => overviewView(ctx)],
    [/^\/topic\/(.+)$/, "topic", "overview", (ctx, m) => topicView(ctx, m[1])],
    [/^\/groups$/, "groups", "groups", (ctx) => groupsView(ctx)],
    [/^\/group\/(.+)$/, "group", "groups", (ctx, m) => groupView(ctx, m[1])],
    [/^\/search$/, "search", "search", (ctx) => searchView(ctx)],
    [/^\/message\/(.+)$/, "message", "search", (ctx, m) => messageView(ctx, m[1])],
    [/^\/trace\/(.+)$/, "trace", "search", (ctx, m) => traceView(ctx, m[1])],
    [/^\/dlq(?:\/(.+))?$/, "dlq", "dlq", (ctx, m) => dlqView(ctx, m[1])],
    [/^\/health$/, "health", "health", (ctx) => healthView(ctx)],
  ];

  let current = null;
  let generation = 0;
  let routed = false;  // false for the page's first view (focus stays at the top), true after a navigation

  function route() {
    if (current) for (const c of current.charts || []) c.destroy();
    const gen = ++generation;
    const raw = location.hash.replace(/^#/, "") || "/";
    const qi = raw.indexOf("?");
    const path = qi < 0 ? raw : raw.slice(0, qi);
    const params = new URLSearchParams(qi < 0 ? "" : raw.slice(qi + 1));
    view.replaceChildren();
    view.dataset.loaded = "0";
    clearError();
    const ctx = { root: view, params, alive: () => gen === generation };
    let nav = null;
    current = null;
    view.dataset.view = "notfound";
    const found = ROUTES.map(([re, ...rest]) => [path.match(re), ...rest]).find(([m]) => m);
    if (found) {
      const [m, name, navName, make] = found;
      view.dataset.view = name;
      nav = navName;
      try {
        current = { live: true, navigated: routed, ...make(ctx, m.map((s) => (s === undefined ? s : decodeURIComponent(s)))) };
      } catch (e) {
        showError(e);
      }
    } else {
      put(view, h("h1", {}, "No such page"), h("p", {}, link("Back to the overview", [""])));
    }
    for (const a of document.querySelectorAll("nav a")) {
      if (a.dataset.nav === nav) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
    }
    routed = true;
    refresh();
  }

  /** One refresh of the current view; a refresh still under way is not doubled. */
  async function refresh() {
    const v = current;
    if (!v || !v.refresh || v.busy) return;
    v.busy = true;
    try {
      await v.refresh();
      if (v === current) {
        const first = !v.titled;
        v.titled = true;
        titleAndFocus(first && v.navigated);
        view.dataset.loaded = String(Number(view.dataset.loaded || 0) + 1);
        document.getElementById("updated").textContent = "updated " + fmtTime(Date.now()).slice(11, 19);
        if (!banner.dataset.sticky) clearError();
      }
    } catch (e) {
      if (v === current) showError(e);
      // What is not there will not appear by asking again every 2 s (a reload or a link asks anew).
      if (e instanceof ApiError && e.status === 404) v.live = false;
    } finally {
      v.busy = false;
    }
  }

  function tick() {
    window.mqlite.ticks++;  // the browser tests count ticks to see that no refresh came of them
    if (!document.hidden && liveToggle.checked && current && current.live) refresh();
  }

  let resizeFrame = 0;
  window.addEventListener("resize", () => {
    cancelAnimationFrame(resizeFrame);
    resizeFrame = requestAnimationFrame(() => { for (const c of (current && current.charts) || []) c.resize(); });
  });
  window.addEventListener("hashchange", route);
  document.addEventListener("visibilitychange", tick);
  liveToggle.addEventListener("change", tick);
  setInterval(tick, REFRESH_MS);
  // The header's store line and the search forms' topic list come from the overview, whatever the first page.
  storeReady = api("api/overview").then((d) => { setStoreLine(d.store); topicNames = d.topics.map((t) => t.topic); }).catch(showError);
  route();
})();
