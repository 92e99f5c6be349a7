// The fleet page's script (web/console/fleet.py): asks the front end for the
// window of samples it keeps, then every few seconds for the points after
// the last one shown, and draws them with uPlot (uPlot.iife.min.js, bundled).
// The token is the console's own (console.js signs in and out; this tab's
// sessionStorage). Every value goes into the page as text or into a canvas.
"use strict";

(() => {
  const TOKEN_KEY = "toolnexus.console.token";
  const COLOURS = ["#1f5fb0", "#b3261e", "#2e7d32", "#8e24aa", "#ef6c00", "#00838f", "#6d4c41", "#546e7a"];
  const OUTCOME_COLOURS = {
    completed: "#2e7d32",
    failed: "#b3261e",
    canceled: "#6d4c41",
    rejected: "#ef6c00",
    "input-required": "#1f5fb0",
    "auth-required": "#8e24aa",
  };
  const MOST_OWNERS = 6; // callers drawn: the busiest in the window
  const HEIGHT = 220;

  const body = document.body;
  const fleetUrl = body.dataset.fleet;
  const points = [];
  const charts = {};
  let windowSeconds = 3600;
  let intervalMs = 5000;
  window.fleetCharts = charts; // what each chart draws, for a reader of the page

  function byId(id) {
    return document.getElementById(id);
  }

  function notice(text) {
    const box = byId("notice");
    box.textContent = text;
    box.hidden = !text;
  }

  function token() {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  }

  async function fetchSince(since) {
    const headers = token() ? { Authorization: `Bearer ${token()}` } : {};
    const response = await fetch(`${fleetUrl}?since=${encodeURIComponent(since)}`, {
      headers,
      credentials: "omit",
      cache: "no-store",
    });
    const reply = await response.json();
    if (response.status === 401) {
      throw new Error(token() ? "the API refused that token: sign in again" : "the API needs a token: sign in above");
    }
    if (!response.ok) throw new Error((reply && reply.error && reply.error.message) || `HTTP ${response.status}`);
    return reply;
  }

  // --- numbers ---------------------------------------------------------------

  function fixed(value, digits) {
    return value === null || value === undefined ? "–" : Number(value).toFixed(digits);
  }

  function sumOf(counts) {
    return counts ? Object.values(counts).reduce((a, b) => a + b, 0) : null;
  }

  function totalRate(point) {
    return point.rates ? sumOf(point.rates) : null;
  }

  function showNow(point, answer) {
    byId("now-rate").textContent = fixed(totalRate(point), 2);
    byId("now-latency").textContent = `${fixed(point.p50, 3)} / ${fixed(point.p99, 3)}`;
    byId("now-depth").textContent = point.queueDepth === null ? "–" : String(point.queueDepth);
    byId("now-oldest").textContent = point.oldestAge === null ? "–" : `${fixed(point.oldestAge, 1)} s`;
    byId("now-turns").textContent =
      point.held === null ? "turns off" : `${sumOf(point.held)} / ${sumOf(point.inFlight)}`;
    byId("now-workers").textContent =
      point.workers === null ? "–" : `${point.workers} / ${point.slots}`;
    byId("owners-off").hidden = point.held !== null;
    const table = byId("worker-table");
    if (answer.admin && answer.workerSlots) {
      const rows = Object.entries(answer.workerSlots).map(([name, slots]) => {
        const row = document.createElement("tr");
        for (const text of [name, String(slots)]) {
          const cell = document.createElement("td");
          cell.textContent = text;
          row.append(cell);
        }
        return row;
      });
      table.tBodies[0].replaceChildren(...rows);
      table.hidden = false;
    }
  }

  // --- charts ----------------------------------------------------------------

  function widthOf(box) {
    return Math.max(280, box.clientWidth || 480);
  }

  // Draw `columns` (x first) on the chart `name`, made again when its series change.
  function draw(name, labels, columns, colours, scales) {
    const box = byId(`chart-${name}`);
    const key = labels.join("\u0000");
    const chart = charts[name];
    if (chart && chart.key === key) {
      chart.plot.setData(columns);
      return;
    }
    if (chart) chart.plot.destroy();
    const series = [{}].concat(
      labels.map((label, index) => ({
        label,
        stroke: colours[index],
        width: 2,
        scale: (scales && scales[index]) || "y",
        spanGaps: false,
      })),
    );
    const axes = [{}, { scale: "y" }];
    if (scales && scales.includes("age")) axes.push({ scale: "age", side: 1, grid: { show: false } });
    const options = { width: widthOf(box), height: HEIGHT, series, axes, scales: { x: { time: true } } };
    charts[name] = { key, plot: new uPlot(options, columns, box) };
  }

  function column(read) {
    return points.map((point) => {
      const value = read(point);
      return value === undefined ? null : value;
    });
  }

  function redraw() {
    const times = points.map((point) => point.t);
    const outcomes = [...new Set(points.flatMap((point) => Object.keys(point.rates || {})))].sort();
    const rateLabels = outcomes.length ? outcomes : ["completed"];
    draw(
      "rates",
      rateLabels,
      [times, ...rateLabels.map((outcome) => column((p) => (p.rates ? (p.rates[outcome] ?? 0) : null)))],
      rateLabels.map((outcome, index) => OUTCOME_COLOURS[outcome] || COLOURS[index % COLOURS.length]),
    );
    draw("latency", ["p50", "p99"], [times, column((p) => p.p50), column((p) => p.p99)], [COLOURS[0], COLOURS[1]]);
    draw(
      "queue",
      ["depth", "oldest age (s)"],
      [times, column((p) => p.queueDepth), column((p) => p.oldestAge)],
      [COLOURS[0], COLOURS[4]],
      ["y", "age"],
    );
    // Every caller seen in the window, the busiest (by its peak) first.
    const peaks = {};
    for (const point of points) {
      for (const owner of Object.keys(point.held || {})) {
        const load = point.held[owner] + (point.inFlight[owner] || 0);
        peaks[owner] = Math.max(peaks[owner] || 0, load);
      }
    }
    const owners = Object.keys(peaks)
      .sort((a, b) => peaks[b] - peaks[a] || a.localeCompare(b))
      .slice(0, MOST_OWNERS)
      .sort();
    const ownerLabels = owners.flatMap((owner) => [`${owner} held`, `${owner} in flight`]);
    draw(
      "owners",
      ownerLabels.length ? ownerLabels : ["held", "in flight"],
      [
        times,
        ...(owners.length
          ? owners.flatMap((owner) => [
              column((p) => (p.held ? (p.held[owner] ?? 0) : null)),
              column((p) => (p.inFlight ? (p.inFlight[owner] ?? 0) : null)),
            ])
          : [column(() => null), column(() => null)]),
      ],
      (ownerLabels.length ? ownerLabels : ["", ""]).map((_, index) => COLOURS[index % COLOURS.length]),
    );
    draw(
      "workers",
      ["workers", "slots"],
      [times, column((p) => p.workers), column((p) => p.slots)],
      [COLOURS[0], COLOURS[2]],
    );
  }

  // --- the loop --------------------------------------------------------------

  function keep(answer) {
    windowSeconds = answer.window;
    intervalMs = Math.max(1000, answer.interval * 1000);
    const last = points.length ? points[points.length - 1].t : 0;
    for (const point of answer.points) if (point.t > last) points.push(point);
    const cutoff = Date.now() / 1000 - windowSeconds;
    while (points.length && points[0].t < cutoff) points.shift();
  }

  async function refresh() {
    const since = points.length ? points[points.length - 1].t : 0;
    try {
      const answer = await fetchSince(since);
      keep(answer);
      notice("");
      if (points.length) {
        redraw();
        showNow(points[points.length - 1], answer);
      }
      const newest = points[points.length - 1];
      byId("fleet-status").textContent = newest
        ? `${points.length} samples; newest at ${new Date(newest.t * 1000).toLocaleTimeString()}.`
        : "no sample yet.";
      body.dataset.samples = String(points.length);
    } catch (error) {
      notice(`The fleet's figures could not be had: ${error.message}`);
    }
    setTimeout(refresh, intervalMs);
  }

  window.addEventListener("resize", () => {
    for (const [name, chart] of Object.entries(charts)) {
      chart.plot.setSize({ width: widthOf(byId(`chart-${name}`)), height: HEIGHT });
    }
  });
  refresh();
})();
