// The task console's only script (web/console/views.py). It calls the A2A
// JSON-RPC API at POST / as any browser client would, with the token the
// user pasted (kept in this tab's sessionStorage) as Authorization, so it
// can show nothing the API would not. Every value from a task goes into the
// page as text (textContent, never HTML): agents and clients are untrusted.
"use strict";

(() => {
  const TOKEN_KEY = "toolnexus.console.token";
  const STATE_PREFIX = "TASK_STATE_";
  const TERMINAL = new Set(["completed", "failed", "canceled", "rejected"]);
  const INTERRUPTED = new Set(["input-required", "auth-required"]);
  const POLL_MS = 3000;
  // A store that scans (one without an index of its own) takes longer to answer
  // the more tasks it holds: one tab spends at most about 1/POLL_LOAD of the
  // server's time polling.
  const POLL_LOAD = 20;
  const PAGE_SIZE = 25;

  const body = document.body;
  const apiUrl = body.dataset.api;
  const consoleUrl = body.dataset.console;

  // --- the page, built from text only ------------------------------------

  function el(tag, attributes, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name === "class") node.className = value;
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === undefined || child === null) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  function byId(id) {
    return document.getElementById(id);
  }

  function notice(text) {
    const box = byId("notice");
    box.textContent = text || "";
    box.hidden = !text;
  }

  function stateName(wire) {
    if (typeof wire !== "string") return "unknown";
    return wire.startsWith(STATE_PREFIX)
      ? wire.slice(STATE_PREFIX.length).toLowerCase().replace(/_/g, "-")
      : wire;
  }

  function stateBadge(wire) {
    const name = stateName(wire);
    return el("span", { class: `state state-${name}` }, name);
  }

  function taskUrl(id) {
    return `${consoleUrl}tasks/${encodeURIComponent(id)}`;
  }

  function ago(timestamp) {
    const moment = Date.parse(timestamp);
    if (Number.isNaN(moment)) return "–";
    const seconds = Math.max(0, Math.round((Date.now() - moment) / 1000));
    if (seconds < 60) return `${seconds} s ago`;
    if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
    if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`;
    return `${Math.round(seconds / 86400)} d ago`;
  }

  // "3 waiting for their turn, 2 running or queued"
  function turnCounts(counts) {
    const held = Number(counts.held) || 0;
    const taken = Number(counts.inFlight) || 0;
    return `${held} waiting for ${held === 1 ? "its" : "their"} turn, ${taken} running or queued`;
  }

  function timeOf(timestamp) {
    return el("time", { datetime: timestamp, title: timestamp }, ago(timestamp));
  }

  function firstText(message) {
    for (const part of (message && message.parts) || []) {
      if (typeof part.text === "string") return part.text;
    }
    return "";
  }

  function firstWords(text, most) {
    const flat = text.replace(/\s+/g, " ").trim();
    return flat.length > most ? `${flat.slice(0, most - 1)}…` : flat;
  }

  // --- the API -------------------------------------------------------------

  class ApiError extends Error {
    constructor(message, code, status, sentToken) {
      super(message);
      this.code = code;
      this.status = status;
      this.sentToken = sentToken; // the token the refused request carried
    }
  }

  function token() {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  }

  function requestHeaders(extra) {
    const headers = { "Content-Type": "application/json", "A2A-Version": "1.0", ...extra };
    if (token()) headers.Authorization = `Bearer ${token()}`;
    return headers;
  }

  let requestId = 0;

  function post(method, params, extra, signal) {
    requestId += 1;
    return fetch(apiUrl, {
      method: "POST",
      headers: requestHeaders(extra),
      body: JSON.stringify({ jsonrpc: "2.0", id: requestId, method, params }),
      credentials: "omit",
      cache: "no-store",
      signal,
    });
  }

  function failure(error, status, sentToken) {
    const message = (error && error.message) || `HTTP ${status}`;
    return new ApiError(message, error && error.code, status, sentToken);
  }

  async function call(method, params) {
    const sentToken = token();
    const response = await post(method, params);
    let reply;
    try {
      reply = await response.json();
    } catch {
      throw failure(null, response.status, sentToken);
    }
    if (reply.error) throw failure(reply.error, response.status, sentToken);
    return reply.result;
  }

  // A GET of the console's own JSON (its turn counts), with the same token
  // and refused the same way as an API call.
  async function getJson(url) {
    const sentToken = token();
    const headers = token() ? { Authorization: `Bearer ${token()}` } : {};
    const response = await fetch(url, { headers, credentials: "omit", cache: "no-store" });
    let reply;
    try {
      reply = await response.json();
    } catch {
      throw failure(null, response.status, sentToken);
    }
    if (!response.ok) throw failure(reply && reply.error, response.status, sentToken);
    return reply;
  }

  // A streaming method: each result goes to onResult(result, eventId) as its
  // Server-Sent Event arrives; resolves when the server ends the stream.
  async function stream(method, params, onResult, options) {
    const extra = { Accept: "text/event-stream" };
    if (options && options.lastEventId !== undefined) {
      extra["Last-Event-ID"] = String(options.lastEventId);
    }
    const sentToken = token();
    const response = await post(method, params, extra, options && options.signal);
    const type = response.headers.get("Content-Type") || "";
    if (!type.startsWith("text/event-stream")) {
      const reply = await response.json().catch(() => ({}));
      if (reply.error || !reply.result) throw failure(reply.error, response.status, sentToken);
      onResult(reply.result, null);
      return;
    }
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let data = [];
    let eventId = null;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, end).replace(/\r$/, "");
        buffer = buffer.slice(end + 1);
        if (line === "") {
          if (data.length) {
            const reply = JSON.parse(data.join("\n"));
            if (reply.error) throw failure(reply.error, response.status, sentToken);
            onResult(reply.result, eventId);
          }
          data = [];
          continue;
        }
        if (line.startsWith(":")) continue; // a comment: keepalive
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "data") data.push(text);
        else if (field === "id") eventId = text;
      }
    }
  }

  // What to tell the user of a failed call ("" when nothing: a refusal of a
  // request sent before the user signed in or out, which a newer one replaces).
  function explain(error) {
    if (error instanceof ApiError && error.status === 401) {
      if (error.sentToken !== token()) return "";
      sessionStorage.removeItem(TOKEN_KEY);
      showSignIn();
      byId("token").focus();
      return error.sentToken
        ? `The API refused that token (${error.message}): sign in again.`
        : "The API needs a token: paste yours above and sign in.";
    }
    return `The API said: ${error.message}`;
  }

  // --- signing in ------------------------------------------------------------

  function showSignIn() {
    byId("sign-in").hidden = false;
    byId("signed-in").hidden = true;
  }

  function showSignedIn() {
    byId("sign-in").hidden = true;
    byId("signed-in").hidden = false;
  }

  function setUpSignIn(reload) {
    if (token()) showSignedIn();
    else showSignIn();
    byId("sign-in").addEventListener("submit", (event) => {
      event.preventDefault();
      const field = byId("token");
      const given = field.value.trim();
      field.value = "";
      if (!given) return;
      sessionStorage.setItem(TOKEN_KEY, given);
      showSignedIn();
      notice("");
      reload();
    });
    byId("sign-out").addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN_KEY);
      showSignIn();
      reload();
    });
  }

  // --- parts, messages, artifacts -----------------------------------------

  function safeLink(url) {
    try {
      const parsed = new URL(url, location.href);
      return parsed.protocol === "http:" || parsed.protocol === "https:" ? parsed.href : null;
    } catch {
      return null;
    }
  }

  function bytesOf(base64) {
    const binary = atob(base64);
    const bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
    return bytes;
  }

  function renderFile(part) {
    const name = part.filename || "file";
    const kind = part.mediaType || "media type not given";
    const row = el("p", { class: "file" });
    if (typeof part.raw === "string") {
      let bytes;
      try {
        bytes = bytesOf(part.raw);
      } catch {
        row.append(`${name} (${kind}): bytes that are not base64`);
        return row;
      }
      // Always a download, never shown in the page's origin, whatever type it claims.
      const blob = new Blob([bytes], { type: "application/octet-stream" });
      const link = el("a", { href: URL.createObjectURL(blob), download: name }, `Download ${name}`);
      row.append(link, ` (${kind}, ${bytes.length} bytes)`);
      return row;
    }
    const href = typeof part.url === "string" ? safeLink(part.url) : null;
    if (href) {
      row.append(el("a", { href, rel: "noopener noreferrer", download: name }, name), ` (${kind}) at ${part.url}`);
    } else {
      row.append(`${name} (${kind}) at ${String(part.url)}`);
    }
    return row;
  }

  function renderPart(part) {
    if (typeof part.text === "string") return el("p", { class: "text" }, part.text);
    if ("data" in part) {
      return el("pre", { class: "data" }, el("code", {}, JSON.stringify(part.data, null, 2)));
    }
    if ("raw" in part || "url" in part) return renderFile(part);
    return el("pre", { class: "data" }, el("code", {}, JSON.stringify(part, null, 2)));
  }

  function renderParts(parts) {
    return (parts || []).map(renderPart);
  }

  function roleName(role) {
    return role === "ROLE_AGENT" ? "agent" : role === "ROLE_USER" ? "user" : String(role);
  }

  function renderMessage(message) {
    const role = roleName(message.role);
    return el("li", { class: `role-${role}` }, el("p", { class: "role" }, role), ...renderParts(message.parts));
  }

  function renderArtifact(artifact) {
    const title = artifact.name || artifact.artifactId || "artifact";
    return el(
      "article",
      { class: "artifact" },
      el("h3", {}, title),
      artifact.description ? el("p", { class: "muted" }, artifact.description) : null,
      ...renderParts(artifact.parts),
    );
  }

  // --- the list ----------------------------------------------------------------

  function listPage() {
    const filters = new URLSearchParams(location.search);
    const state = filters.get("state") || "";
    const context = filters.get("context") || "";
    const pages = [""]; // the page tokens of the pages shown so far
    let page = 0;
    let watermark = null; // the newest status timestamp seen
    let loading = null;
    let answering = false; // the last reload worked: polling makes sense
    // Each reload's number: answers of an older one that come in after a newer
    // one began (a slow load, then a sign-out) are dropped, never shown over it.
    let generation = 0;

    function query(extra) {
      const params = { ...extra };
      if (context) params.contextId = context;
      return params;
    }

    async function counts(current = () => true) {
      const list = byId("counts");
      const options = [...byId("filter-state").options].map((o) => o.value).filter(Boolean);
      const totals = await Promise.all(
        options.map((name) => call("ListTasks", query({ status: name, pageSize: 1, historyLength: 0 })).then((r) => r.totalSize)),
      );
      if (!current()) return;
      list.replaceChildren(
        ...options.map((name, i) => {
          const target = new URLSearchParams({ state: name });
          if (context) target.set("context", context);
          return el(
            "li",
            {},
            el("a", { href: `${consoleUrl}?${target}` }, stateBadge(name), ` ${totals[i]}`),
          );
        }),
      );
    }

    // The caller's tasks waiting for their turn and taken (queued or running),
    // when turns are on; an administrator also sees every owner's. Nothing is
    // shown when turns are off or the counts cannot be had (the list says why).
    async function turns(current = () => true) {
      let answer = null;
      try {
        answer = await getJson(`${consoleUrl}api/turns`);
      } catch {
        answer = null;
      }
      if (!current()) return;
      const box = byId("turns");
      if (!answer || !answer.turns || !answer.owner) {
        box.replaceChildren();
        box.hidden = true;
        return;
      }
      const shown = [el("p", { id: "turns-mine" }, `Your tasks: ${turnCounts(answer.owner)}.`)];
      if (answer.admin && answer.owners) {
        const rows = Object.entries(answer.owners).map(([owner, counts]) =>
          el(
            "tr",
            {},
            el("td", {}, owner ? el("code", {}, owner) : el("span", { class: "muted" }, "(no token)")),
            el("td", { class: "number" }, String(counts.held)),
            el("td", { class: "number" }, String(counts.inFlight)),
          ),
        );
        shown.push(
          el(
            "p",
            { class: "muted" },
            `Every owner's tasks (you are an administrator); the live workers have ${answer.capacity} slot${answer.capacity === 1 ? "" : "s"}.`,
          ),
          el(
            "table",
            { id: "turns-owners" },
            el("caption", { class: "visually-hidden" }, "Every owner's tasks waiting for their turn and taken"),
            el(
              "thead",
              {},
              el(
                "tr",
                {},
                el("th", { scope: "col" }, "Owner"),
                el("th", { scope: "col", class: "number" }, "Waiting for their turn"),
                el("th", { scope: "col", class: "number" }, "Running or queued"),
              ),
            ),
            el("tbody", {}, ...rows),
          ),
        );
      }
      box.replaceChildren(...shown);
      box.hidden = false;
    }

    function row(task) {
      const status = task.status || {};
      const first = (task.history || []).find((m) => m.role === "ROLE_USER");
      const contextLink = new URLSearchParams({ context: task.contextId || "" });
      return el(
        "tr",
        {},
        el("td", {}, el("a", { href: taskUrl(task.id) }, el("code", {}, task.id))),
        el("td", {}, stateBadge(status.state)),
        el("td", {}, task.contextId ? el("a", { href: `${consoleUrl}?${contextLink}` }, el("code", {}, task.contextId)) : "–"),
        el("td", {}, firstWords(firstText(first), 80) || "–"),
        el("td", {}, status.timestamp ? timeOf(status.timestamp) : "–"),
      );
    }

    async function show(current = () => true) {
      const params = query({ pageSize: PAGE_SIZE });
      if (state) params.status = state;
      if (pages[page]) params.pageToken = pages[page];
      const result = await call("ListTasks", params);
      if (!current()) return;
      const tasks = result.tasks || [];
      byId("tasks").tBodies[0].replaceChildren(...tasks.map(row));
      const total = result.totalSize;
      const first = page * PAGE_SIZE;
      byId("list-status").textContent = tasks.length
        ? `Tasks ${first + 1} to ${first + tasks.length} of ${total}.`
        : "No tasks yet: send a message above.";
      pages.length = page + 1;
      if (result.nextPageToken) pages.push(result.nextPageToken);
      byId("newer").disabled = page === 0;
      byId("older").disabled = !result.nextPageToken;
      return result;
    }

    function newestOf(result) {
      const top = ((result && result.tasks) || [])[0];
      return top && top.status ? top.status.timestamp : null;
    }

    async function newest() {
      return newestOf(await call("ListTasks", query({ pageSize: 1, historyLength: 0 })));
    }

    function reload() {
      const mine = ++generation;
      const current = () => mine === generation;
      loading = (async () => {
        try {
          // The first page with no state chosen starts with the newest task
          // itself: its answer gives the mark, and the load one count fewer.
          const ownMark = page === 0 && !state;
          const mark = ownMark ? null : await newest();
          const [shown] = await Promise.all([show(current), counts(current), turns(current)]);
          if (!current()) return;
          watermark = ownMark ? newestOf(shown) : mark;
          answering = true;
          notice("");
        } catch (error) {
          if (!current()) return;
          answering = false;
          notice(explain(error));
        }
      })();
      return loading;
    }

    // Live: while the page is visible, one cheap ListTasks asks whether any
    // of the caller's tasks changed since the newest one shown; the next ask
    // waits POLL_MS, or POLL_LOAD times as long as this one took if longer.
    async function poll() {
      const began = performance.now();
      try {
        await changes();
      } finally {
        const spent = performance.now() - began;
        setTimeout(poll, Math.max(POLL_MS, POLL_LOAD * spent));
      }
    }

    async function changes() {
      if (document.visibilityState !== "visible" || !loading) return;
      await loading;
      if (!answering) return; // signed out or refused: wait for a sign-in
      try {
        const params = query({ pageSize: 1, historyLength: 0 });
        if (watermark) params.statusTimestampAfter = watermark;
        const result = await call("ListTasks", params);
        if ((result.tasks || []).length) {
          if (page === 0) await reload();
          else {
            watermark = result.tasks[0].status.timestamp;
            byId("list-status").textContent = "Tasks changed since this page was loaded: Newer leads back to them.";
          }
        }
      } catch {
        // the next reload says what is wrong
      }
    }

    // A page token holds its listing still for a while only: when one is
    // refused (expired), start again from the first page.
    function turn(to) {
      page = to;
      show().catch((error) => {
        notice(explain(error));
        page = 0;
        pages.length = 1;
        reload();
      });
    }

    byId("newer").addEventListener("click", () => turn(Math.max(0, page - 1)));
    byId("older").addEventListener("click", () => turn(pages.length > page + 1 ? page + 1 : page));
    byId("send").addEventListener("submit", (event) => {
      event.preventDefault();
      sendFromForm(event.target);
    });
    setUpSignIn(reload);
    reload();
    setTimeout(poll, POLL_MS);
  }

  function fileAsPart(file) {
    return new Promise((resolve, reject) => {
      const reader = new FileReader();
      reader.onload = () => {
        const url = String(reader.result);
        resolve({ raw: url.slice(url.indexOf(",") + 1), filename: file.name, mediaType: file.type || "application/octet-stream" });
      };
      reader.onerror = () => reject(reader.error);
      reader.readAsDataURL(file);
    });
  }

  async function sendFromForm(form) {
    const result = byId("send-result");
    const button = form.querySelector("button[type=submit]");
    const parts = [{ text: form.elements.text.value }];
    button.disabled = true;
    result.replaceChildren(el("p", { class: "muted" }, "Sending…"));
    try {
      const file = form.elements.file.files[0];
      if (file) parts.push(await fileAsPart(file));
      const message = { role: "ROLE_USER", messageId: crypto.randomUUID(), parts };
      const controller = new AbortController();
      await stream(
        "SendStreamingMessage",
        { message },
        (answer) => {
          if (answer.task) {
            controller.abort(); // the task page follows it from here
            location.assign(taskUrl(answer.task.id));
          } else if (answer.message) {
            controller.abort();
            result.replaceChildren(
              el("p", {}, "The agent answered with a message (no task):"),
              el("ol", { class: "messages" }, renderMessage(answer.message)),
            );
          }
        },
        { signal: controller.signal },
      ).catch((error) => {
        if (error.name !== "AbortError") throw error;
      });
      form.reset();
    } catch (error) {
      result.replaceChildren(el("p", { role: "alert" }, explain(error)));
    } finally {
      button.disabled = false;
    }
  }

  // --- one task ------------------------------------------------------------------

  function taskPage() {
    const id = body.dataset.taskId;
    const seen = new Set(); // event ids already on the timeline
    let current = null;
    let following = false;
    let refreshing = null;
    let again = false;

    function render(task) {
      current = task;
      const status = task.status || {};
      const state = stateName(status.state);
      byId("state").replaceChildren(stateBadge(status.state));
      const contextBox = byId("context");
      if (task.contextId) {
        const link = new URLSearchParams({ context: task.contextId });
        contextBox.replaceChildren(el("a", { href: `${consoleUrl}?${link}` }, el("code", {}, task.contextId)));
      } else {
        contextBox.textContent = "–";
      }
      byId("updated").replaceChildren(status.timestamp ? timeOf(status.timestamp) : "–");
      byId("status-message").replaceChildren(
        status.message ? el("ol", { class: "messages" }, renderMessage(status.message)) : el("p", { class: "muted" }, "none"),
      );
      const history = task.history || [];
      byId("history").replaceChildren(...(history.length ? history.map(renderMessage) : [el("li", { class: "muted" }, "none")]));
      const artifacts = task.artifacts || [];
      byId("artifacts").replaceChildren(
        ...(artifacts.length ? artifacts.map(renderArtifact) : [el("p", { class: "muted" }, "none")]),
      );
      byId("cancel").hidden = TERMINAL.has(state);
      byId("reply").hidden = !INTERRUPTED.has(state);
    }

    // The page shows what GetTask says; an event only says it is time to ask again.
    function refresh() {
      if (refreshing) {
        again = true;
        return refreshing;
      }
      refreshing = (async () => {
        try {
          do {
            again = false;
            render(await call("GetTask", { id }));
          } while (again);
          notice("");
        } catch (error) {
          notice(explain(error));
        } finally {
          refreshing = null;
        }
      })();
      return refreshing;
    }

    function transition(state, timestamp, eventId) {
      if (eventId !== null) {
        if (seen.has(eventId)) return;
        seen.add(eventId);
      }
      byId("transitions").append(
        el("li", {}, timestamp ? el("time", { datetime: timestamp }, timestamp) : "time not recorded", " ", stateBadge(state)),
      );
    }

    function onEvent(result, eventId) {
      if (result.statusUpdate) {
        const status = result.statusUpdate.status || {};
        transition(status.state, status.timestamp, eventId);
      } else if (result.task && result.task.status && eventId !== null && !seen.size) {
        // The log no longer reaches back to the start: begin with the task as it stands.
        byId("transitions").append(el("li", { class: "muted" }, "earlier transitions are no longer in the event log"));
      }
      refresh();
    }

    // Follow the task's event log from its first event (Last-Event-ID: 0):
    // every transition so far, then live ones, until it finishes or stops for input.
    async function follow(method, params, after) {
      following = true;
      byId("live").textContent = "Following the task live…";
      try {
        await stream(method, params, onEvent, after === undefined ? {} : { lastEventId: after });
        byId("live").textContent = "";
      } catch (error) {
        byId("live").textContent = "";
        if (error instanceof ApiError && error.status !== 401 && method === "SubscribeToTask") {
          // No event log to follow here: ask GetTask until the task is at rest.
          await pollUntilAtRest();
        } else {
          notice(explain(error));
        }
      } finally {
        following = false;
        await refresh();
      }
    }

    async function pollUntilAtRest() {
      for (;;) {
        await refresh();
        const state = current ? stateName(current.status && current.status.state) : "";
        if (!current || TERMINAL.has(state) || INTERRUPTED.has(state)) return;
        await new Promise((resolve) => setTimeout(resolve, 1000));
      }
    }

    async function load() {
      await refresh();
      if (current && !following) {
        byId("transitions").replaceChildren();
        seen.clear();
        await follow("SubscribeToTask", { id }, 0);
      }
    }

    byId("cancel").addEventListener("click", async () => {
      try {
        render(await call("CancelTask", { id }));
      } catch (error) {
        notice(explain(error));
      }
    });
    byId("reply").addEventListener("submit", async (event) => {
      event.preventDefault();
      const form = event.target;
      const message = {
        role: "ROLE_USER",
        messageId: crypto.randomUUID(),
        taskId: id,
        parts: [{ text: form.elements.text.value }],
      };
      if (current && current.contextId) message.contextId = current.contextId;
      form.hidden = true;
      form.reset();
      // The reply's stream carries the events after the last one shown: the timeline goes on.
      await follow("SendStreamingMessage", { message }, undefined);
    });
    setUpSignIn(load);
    load();
  }

  // --- the failed view (web/console/triage.py) ------------------------------

  // A POST of the console's own JSON, with the same token, refused the same
  // way as an API call.
  async function postJson(url, value) {
    const sentToken = token();
    const headers = { "Content-Type": "application/json" };
    if (token()) headers.Authorization = `Bearer ${token()}`;
    const response = await fetch(url, {
      method: "POST",
      headers,
      body: JSON.stringify(value),
      credentials: "omit",
      cache: "no-store",
    });
    let reply;
    try {
      reply = await response.json();
    } catch {
      throw failure(null, response.status, sentToken);
    }
    if (!response.ok) throw failure(reply && reply.error, response.status, sentToken);
    return reply;
  }

  function failedPage() {
    const status = byId("failed-status");
    const result = byId("rerun-result");
    let loading = 0;

    async function rerun(ids, button) {
      button.disabled = true;
      try {
        const answer = await postJson(`${consoleUrl}api/rerun`, { ids });
        const made = [];
        const refused = [];
        for (const [id, one] of Object.entries(answer.reruns || {})) {
          if (one.taskId) made.push([id, one.taskId]);
          else refused.push(`${id}: ${(one.error && one.error.message) || "refused"}`);
        }
        const items = made.map(([id, taskId]) =>
          el("li", {}, `${id} → `, el("a", { href: taskUrl(taskId), class: "rerun" }, taskId)),
        );
        for (const line of refused) items.push(el("li", { class: "refused" }, line));
        result.replaceChildren(
          el("p", {}, `Ran ${made.length} task${made.length === 1 ? "" : "s"} again.`),
          el("ul", { class: "reruns" }, ...items),
        );
      } catch (error) {
        notice(explain(error));
        button.disabled = false;
      }
    }

    function taskRow(task, admin) {
      const again = el("button", { type: "button", class: "rerun-one" }, "Run again");
      again.addEventListener("click", () => rerun([task.id], again));
      return el(
        "tr",
        {},
        el("td", {}, el("a", { href: taskUrl(task.id) }, el("code", {}, task.id))),
        admin ? el("td", {}, task.owner || "(anonymous)") : null,
        el("td", {}, timeOf(task.failedAt)),
        el("td", { class: "reason" }, task.reason),
        el("td", {}, again),
      );
    }

    function groupSection(group, admin) {
      const all = el("button", { type: "button", class: "rerun-group" }, `Run all ${group.count} again`);
      all.addEventListener("click", () => rerun(group.ids, all));
      const head = el(
        "tr",
        {},
        el("th", { scope: "col" }, "Task"),
        admin ? el("th", { scope: "col" }, "Owner") : null,
        el("th", { scope: "col" }, "Failed"),
        el("th", { scope: "col" }, "Reason"),
        el("th", { scope: "col" }, el("span", { class: "visually-hidden" }, "Action")),
      );
      return el(
        "section",
        { class: "failure-group", "data-group": group.group },
        el("h2", {}, group.group, " ", el("span", { class: "count muted" }, `${group.count}`)),
        el("p", { class: "actions" }, all),
        el(
          "table",
          {},
          el("thead", {}, head),
          el("tbody", {}, ...group.tasks.map((task) => taskRow(task, admin))),
        ),
      );
    }

    async function load() {
      loading += 1;
      const mine = loading;
      try {
        const look = await getJson(`${consoleUrl}api/failed`);
        if (mine !== loading) return;
        const whose = look.everyone ? "every owner's" : "your";
        const total = look.total === null ? "" : ` of ${look.total}`;
        status.textContent = look.window
          ? `The newest ${look.window}${total} of ${whose} failed tasks, by reason.`
          : `None of ${whose} tasks failed.`;
        byId("groups").replaceChildren(...look.groups.map((group) => groupSection(group, look.admin)));
      } catch (error) {
        if (mine !== loading) return;
        status.textContent = "";
        notice(explain(error));
      }
    }

    setUpSignIn(load);
    load();
  }

  if (body.dataset.page === "tasks") listPage();
  else if (body.dataset.page === "task") taskPage();
  // The fleet page draws with its own script (fleet.js); signing in or out reloads it.
  else if (body.dataset.page === "fleet") setUpSignIn(() => window.location.reload());
  else if (body.dataset.page === "failed") failedPage();
})();
