// meta-agent's views (run, tools, runs) and both bridges: MCP Apps JSON-RPC over postMessage inside a host's iframe,
// or fetch to /ui/api/call in the console. Data from a model, a child or a user reaches the DOM only as text
// (textContent, createTextNode), never as markup, never as an href or src, never as code.
(() => {
  "use strict";

  const POLL_MS = 1000; // the contract's poll interval while a run is running
  const FIND_FOR_MS = 30000; // how long a host's tool call may go without a run before the view says so
  const MAX_BACKOFF_MS = 15000; // the longest wait between two polls after failures
  const MAX_FAILURES = 6; // failed polls in a row before the view stops polling
  const CALL_TIMEOUT_MS = 60000; // a host request left unanswered this long fails
  const MAX_SHOWN = 100000; // characters of a text shown at once (more on demand), so a huge result cannot freeze the view
  const RUNS_REFRESH_MS = 5000; // the runs list refreshes this often while a run is live
  const RUN_ID = /^[0-9A-Z]{26}$/;
  const TRUST = ["never", "ask", "always"];
  const MODES = ["ask", "plan", "agent"];
  const docEl = document.documentElement;
  const inHost = window.parent !== window;

  // ---- text and elements

  // C0/C1 controls (but newline and tab) and bidi controls shown as symbols, never obeyed.
  const CONTROLS = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

  function safe(value) {
    const text = typeof value === "string" ? value : value == null ? "" : String(value);
    return text.replace(/\r\n/g, "\n").replace(CONTROLS, (c) => {
      const code = c.charCodeAt(0);
      if (code < 0x20) return String.fromCharCode(0x2400 + code);
      if (code === 0x7f) return "\u2421";
      return "\\u" + code.toString(16).toUpperCase().padStart(4, "0");
    });
  }

  function el(tag, props, ...kids) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value == null || value === false) continue;
      if (key === "class") node.className = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else if (key === "checked" || key === "disabled" || key === "value") node[key] = value;
      else node.setAttribute(key, value === true ? "" : safe(value));
    }
    for (const kid of kids.flat()) {
      if (kid == null || kid === false) continue;
      node.append(kid instanceof Node ? kid : document.createTextNode(safe(kid)));
    }
    return node;
  }

  // A text in a <pre> or <p>: its first MAX_SHOWN characters, and MAX_SHOWN more at each press of a button.
  function textBlock(tag, cls, value) {
    const full = safe(value);
    const node = el(tag, { class: cls });
    if (full.length <= MAX_SHOWN) {
      node.textContent = full;
      return node;
    }
    let shown = MAX_SHOWN;
    node.textContent = full.slice(0, shown);
    const left = el("span");
    const more = el("button", { type: "button" }, `Show ${MAX_SHOWN.toLocaleString("en")} more characters`);
    const note = el("p", { class: "meta" }, left, " ", more);
    const count = () => {
      left.textContent = `${(full.length - shown).toLocaleString("en")} of ${full.length.toLocaleString("en")} characters not shown.`;
    };
    more.addEventListener("click", () => {
      node.append(document.createTextNode(full.slice(shown, shown + MAX_SHOWN)));
      shown += MAX_SHOWN;
      if (shown >= full.length) note.remove();
      else count();
    });
    count();
    return el("div", null, node, note);
  }

  function pretty(value) {
    if (typeof value === "string") return value;
    try {
      return JSON.stringify(value, null, 2) ?? String(value);
    } catch {
      return String(value);
    }
  }

  function num(value) {
    return typeof value === "number" && Number.isFinite(value) ? value.toLocaleString("en") : "?";
  }

  let ids = 0;
  const nextId = (prefix) => `${prefix}-${++ids}`;

  // A console link to one of our own pages: a fixed path, or a run's page for an id of the run id's form.
  function pageLink(path, text) {
    return el("a", { href: path }, text);
  }

  function runLink(runId) {
    return RUN_ID.test(runId) && !inHost ? pageLink(`/ui/runs/${runId}`, runId) : el("span", null, safe(runId));
  }

  // A status line changes only when its text does, so a screen reader does not announce every poll.
  function setStatus(node, text, cls) {
    const shown = safe(text);
    node.className = cls ? `status ${cls}` : "status";
    if (node.textContent !== shown) node.textContent = shown;
  }

  function nav(...links) {
    return inHost ? null : el("nav", { class: "bar", "aria-label": "pages" }, links);
  }

  // ---- bridges

  class HostBridge {
    constructor() {
      this.next = 1;
      this.waiting = new Map();
      this.handlers = new Map();
      window.addEventListener("message", (event) => this.receive(event));
    }

    on(method, handler) {
      this.handlers.set(method, handler);
    }

    post(message) {
      window.parent.postMessage({ jsonrpc: "2.0", ...message }, "*");
    }

    notify(method, params) {
      this.post({ method, params });
    }

    request(method, params) {
      const id = this.next++;
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          this.waiting.delete(id);
          reject(new Error(`The host did not answer ${method}.`));
        }, CALL_TIMEOUT_MS);
        this.waiting.set(id, { resolve, reject, timer });
        this.post({ id, method, params });
      });
    }

    receive(event) {
      if (event.source !== window.parent) return;
      const msg = event.data;
      if (!msg || typeof msg !== "object" || msg.jsonrpc !== "2.0") return;
      if (typeof msg.method === "string") {
        if ("id" in msg) this.answer(msg);
        else this.handlers.get(msg.method)?.(msg.params || {});
        return;
      }
      const waiter = this.waiting.get(msg.id);
      if (!waiter) return;
      this.waiting.delete(msg.id);
      clearTimeout(waiter.timer);
      if (msg.error) waiter.reject(new Error(safe(msg.error.message || "The host refused the request.")));
      else waiter.resolve(msg.result);
    }

    answer(msg) {
      if (msg.method === "ui/resource-teardown" || msg.method === "ping") {
        if (msg.method === "ui/resource-teardown") app.teardown();
        this.post({ id: msg.id, result: {} });
      } else {
        this.post({ id: msg.id, error: { code: -32601, message: `Method not found: ${msg.method}` } });
      }
    }

    async start() {
      const result = await this.request("ui/initialize", {
        protocolVersion: "2026-01-26",
        appInfo: { name: "meta-agent", version: "1" },
        appCapabilities: {},
      });
      this.notify("ui/notifications/initialized", {});
      return (result && result.hostContext) || {};
    }

    call(name, args) {
      return this.request("tools/call", { name, arguments: args });
    }
  }

  class ConsoleBridge {
    on() {}

    async start() {
      return {};
    }

    async call(name, args) {
      const response = await fetch("/ui/api/call", {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-Meta-Agent-UI": "1" },
        body: JSON.stringify({ name, arguments: args }),
      });
      let body = null;
      try {
        body = await response.json();
      } catch {
        body = null;
      }
      if (body && typeof body === "object" && ("structuredContent" in body || "isError" in body)) return body;
      throw new Error(`${name}: the console answered ${response.status}.`);
    }
  }

  const bridge = inHost ? new HostBridge() : new ConsoleBridge();

  async function callTool(name, args) {
    const result = await bridge.call(name, args);
    if (!result || typeof result !== "object") throw new Error(`${name}: no answer.`);
    if (result.isError) {
      const first = Array.isArray(result.content) ? result.content[0] : null;
      throw new Error(first && typeof first.text === "string" ? first.text : `${name} failed.`);
    }
    return result.structuredContent && typeof result.structuredContent === "object" ? result.structuredContent : {};
  }

  // ---- theme and size

  const darkMedia = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;
  let hostTheme = null;

  function applyTheme() {
    docEl.dataset.theme = hostTheme || (darkMedia && darkMedia.matches ? "dark" : "light");
  }

  function applyContext(ctx) {
    if (!ctx || typeof ctx !== "object") return;
    if (ctx.theme === "light" || ctx.theme === "dark") hostTheme = ctx.theme;
    applyTheme();
    const vars = ctx.styles && ctx.styles.variables;
    if (vars && typeof vars === "object") {
      for (const [name, value] of Object.entries(vars)) {
        if (/^--[A-Za-z0-9-]+$/.test(name) && typeof value === "string" && !/url\(/i.test(value)) {
          docEl.style.setProperty(name, value);
        }
      }
    }
  }

  darkMedia?.addEventListener?.("change", applyTheme);

  function reportSize() {
    let last = -1;
    const send = () => {
      const height = Math.ceil(docEl.getBoundingClientRect().height);
      if (height === last) return;
      last = height;
      bridge.notify("ui/notifications/size-changed", { width: Math.ceil(docEl.scrollWidth), height });
    };
    new ResizeObserver(send).observe(docEl);
    send();
  }

  // ---- the run view

  class RunView {
    constructor({ runId = null, requestId = null, task = null, back = null } = {}) {
      this.runId = runId;
      this.requestId = requestId;
      this.task = task;
      this.back = back;
      this.after = 0;
      this.steps = new Map();
      this.calls = new Map();
      this.asked = new Map();
      this.shownPending = new Map();
      this.looping = false;
      this.stopped = false;
      this.finished = false;
      this.ended = false;
      this.wake = null;
    }

    mount(root) {
      this.statusLine = el("p", { class: "status", role: "status" }, "Looking for the run…");
      this.about = el("p", { class: "meta" });
      this.started = el("div");
      this.pending = el("div", { class: "pending", role: "region", "aria-label": "approvals" });
      this.log = el("div", { class: "log" });
      this.end = el("div");
      const back = this.back ? el("button", { type: "button", onclick: this.back }, "Back to tools") : null;
      const links = nav(pageLink("/ui", "All runs"), pageLink("/ui/tools", "Tools"));
      root.append(links || "", el("div", { class: "bar" }, el("h1", null, "meta-agent run"), back));
      root.append(this.statusLine, this.about, this.started, this.pending, this.log, this.end);
      this.showAbout();
      this.kick();
    }

    stop() {
      this.stopped = true;
      this.wakeUp();
    }

    setStatus(text, cls = "") {
      setStatus(this.statusLine, text, cls);
    }

    showAbout(run) {
      const parts = [];
      if (run) parts.push(el("span", { class: `badge ${safe(run.status)}` }, run.status), " ", run.mode, " · ");
      if (run && run.run_id) parts.push(runLink(run.run_id), " · ");
      const task = (run && run.task) || this.task;
      if (task) parts.push(el("span", { class: "text" }, task));
      this.about.replaceChildren(...parts.map((p) => (typeof p === "string" ? document.createTextNode(safe(p)) : p)));
    }

    toolInput(args) {
      const task = args && (args.task ?? args.prompt);
      if (typeof task === "string") this.task = task;
      if (!this.runId) this.showAbout();
      this.kick();
    }

    toolResult(result) {
      const sc = result && result.structuredContent;
      if (sc && typeof sc.run_id === "string" && sc.run_id) {
        if (!this.runId) this.runId = sc.run_id;
        this.kick();
      } else if (result && result.isError && !this.runId) {
        const first = Array.isArray(result.content) ? result.content[0] : null;
        this.setStatus(`The call failed: ${first && first.text ? first.text : "no reason given"}`, "error");
        this.stop();
      } else {
        this.kick();
      }
    }

    cancelled(reason) {
      if (!this.finished) this.setStatus(`The host cancelled the call${reason ? `: ${reason}` : ""}.`, "warn");
    }

    args() {
      if (this.runId) return { run_id: this.runId, after: this.after };
      if (this.requestId == null) return this.task ? { task: this.task, after: this.after } : null;
      const args = { request_id: this.requestId, after: this.after };
      if (this.task) args.task = this.task;
      return args;
    }

    sleep(ms) {
      return new Promise((resolve) => {
        const timer = setTimeout(() => {
          this.wake = null;
          resolve();
        }, ms);
        this.wake = () => {
          clearTimeout(timer);
          this.wake = null;
          resolve();
        };
      });
    }

    wakeUp() {
      this.wake?.();
    }

    kick() {
      if (this.finished || this.stopped) return;
      if (this.looping) this.wakeUp();
      else this.loop();
    }

    async loop() {
      this.looping = true;
      const begun = Date.now();
      let failures = 0;
      let misses = 0;
      try {
        while (!this.stopped && !this.finished) {
          const args = this.args();
          if (!args) {
            if (Date.now() - begun > FIND_FOR_MS) return this.setStatus("No run to show: the host named no tool call.", "error");
            await this.sleep(POLL_MS);
            continue;
          }
          let answer;
          try {
            answer = await callTool("app_run", args);
            failures = 0;
          } catch (err) {
            failures += 1;
            if (failures >= MAX_FAILURES) return this.setStatus(`Stopped following the run: ${err.message}`, "error");
            this.setStatus(`${err.message} (trying again)`, "error");
            await this.sleep(Math.min(POLL_MS * 2 ** failures, MAX_BACKOFF_MS));
            continue;
          }
          if (!answer.run) {
            if (Date.now() - begun > FIND_FOR_MS) return this.setStatus("No run found for this call.", "error");
            this.setStatus("Waiting for the run to start…");
            misses += 1;
            await this.sleep(Math.min(POLL_MS * misses, MAX_BACKOFF_MS / 3));
            continue;
          }
          const events = this.absorb(answer);
          if (answer.more && events > 0) continue;
          if (answer.run.status !== "running") return this.finish(answer);
          await this.sleep(POLL_MS);
        }
      } finally {
        this.looping = false;
      }
    }

    absorb(answer) {
      const run = answer.run;
      if (typeof run.run_id === "string") this.runId = run.run_id;
      this.showAbout(run);
      const events = Array.isArray(answer.events) ? answer.events : [];
      for (const event of events) {
        if (!event || typeof event !== "object") continue;
        if (typeof event.seq === "number") {
          if (event.seq <= this.after) continue;
          this.after = event.seq;
        }
        this.render(event);
      }
      if (typeof answer.cursor === "number" && answer.cursor > this.after) this.after = answer.cursor;
      if (run.status === "running") {
        this.showPending(Array.isArray(answer.pending) ? answer.pending : []);
        if (!this.ended) this.setStatus(`running · step ${this.steps.size}`);
      }
      return events.length;
    }

    finish(answer) {
      this.finished = true;
      this.showPending([]);
      const result = answer.result;
      if (!this.ended && result && typeof result === "object") {
        this.renderEnd({ stop_reason: result.stop_reason, answer: result.answer, usage: result.usage, limits: result.limits });
      }
      const status = answer.run.status;
      if (status === "interrupted") this.setStatus("interrupted", "warn");
      else if (this.failure) this.setStatus(`done · failed: ${this.failure}`, "error");
      else this.setStatus(`done · ${this.stopReason || (result && result.stop_reason) || "finished"}`, "ok");
    }

    stepBox(step) {
      if (!(typeof step === "number" && step > 0)) return this.log;
      let box = this.steps.get(step);
      if (!box) {
        box = el("section", { class: "step", "aria-label": `step ${step}` }, el("h3", null, `Step ${step}`));
        this.steps.set(step, box);
        this.log.append(box);
      }
      return box;
    }

    line(step, text, cls = "") {
      const node = el("p", { class: `line ${cls}` }, text);
      this.stepBox(step).append(node);
      return node;
    }

    callBox(event) {
      let box = this.calls.get(event.call_id);
      if (!box) {
        box = el("div", { class: "call" }, el("p", { class: "line" }, "Tool call ", el("code", null, event.name)));
        this.calls.set(event.call_id, box);
        this.stepBox(event.step).append(box);
      }
      return box;
    }

    render(event) {
      const step = event.step;
      switch (event.kind) {
        case "run_started":
          return this.renderStarted(event);
        case "model_turn":
          return event.final ? this.line(step, "The model's final turn.", "meta") : null;
        case "thinking": {
          const details = el("details", null, el("summary", null, "Reasoning"), textBlock("pre", "", event.text));
          return this.stepBox(step).append(details);
        }
        case "model_reply":
          return this.renderReply(event);
        case "tool_call": {
          const box = this.callBox(event);
          if (event.cut) box.append(el("p", { class: "meta" }, "arguments cut"));
          return box.append(textBlock("pre", "", pretty(event.arguments)));
        }
        case "tool_result":
          return this.renderResult(event);
        case "approval_requested": {
          const box = this.callBox(event);
          const node = el("p", { class: "line warn" }, "Waiting for approval.");
          this.asked.set(event.call_id, node);
          return box.append(node);
        }
        case "approval_answered": {
          const text = `${event.allowed ? "Approved" : "Denied"}: ${event.answer || ""}`;
          const node = this.asked.get(event.call_id);
          if (node) {
            node.className = `line ${event.allowed ? "ok" : "error"}`;
            node.textContent = safe(text);
            return null;
          }
          return this.line(step, `${event.name}: ${text}`, event.allowed ? "ok" : "error");
        }
        case "model_switched":
          return this.line(step, `Model ${event.failed} failed; switched to ${event.next}. ${event.brief || ""}`, "warn");
        case "limit":
          return this.line(step, `Limit reached: ${event.limit}`, "warn");
        case "run_finished":
          return this.renderEnd(event);
        case "run_failed":
          this.failure = safe(event.error);
          this.ended = true;
          return this.end.append(el("section", { class: "block" }, el("h2", null, "Failed"), textBlock("p", "text error", event.error)));
        case "dropped":
          return this.line(step, `${num(event.count)} events not shown.`, "meta");
        default:
          return null;
      }
    }

    renderStarted(event) {
      const tools = Array.isArray(event.tools) ? event.tools : [];
      const summary = `${num(event.tool_count)} tools`;
      const list = el("details", null, el("summary", null, summary), el("p", { class: "mono text" }, tools.join(", ")));
      const out = Array.isArray(event.unavailable) ? event.unavailable : [];
      const missing = out.map((u) => el("li", null, `${u.server}: ${u.reason}`));
      if (typeof event.task === "string" && !this.task) this.task = event.task;
      this.started.replaceChildren(
        el("p", { class: "meta" }, `Mode ${event.mode} · model ${event.model}`),
        list,
        missing.length ? el("div", null, el("p", { class: "warn" }, "Servers not available:"), el("ul", null, missing)) : "",
      );
    }

    renderReply(event) {
      const box = this.stepBox(event.step);
      if (event.text) box.append(textBlock("p", "text", event.text));
      const calls = Array.isArray(event.tool_calls) && event.tool_calls.length ? ` · calls ${event.tool_calls.join(", ")}` : "";
      const meta = `${num(event.input_tokens)} tokens in · ${num(event.output_tokens)} out · ${num(event.duration_ms)} ms${calls}`;
      box.append(el("p", { class: "meta" }, meta));
    }

    renderResult(event) {
      const box = this.callBox(event);
      box.classList.add(event.ok ? "succeeded" : "failed");
      const bits = [event.ok ? "Result" : "Error", `${num(event.duration_ms)} ms`];
      if (event.images) bits.push(`${num(event.images)} images`);
      if (event.cut) bits.push("cut");
      box.append(el("p", { class: `line ${event.ok ? "ok" : "error"}` }, bits.join(" · ")));
      if (event.error) box.append(textBlock("p", "text error", event.error));
      if (event.text) box.append(textBlock("pre", "", event.text));
      else if (!event.error) box.append(el("p", { class: "meta" }, "(no text)"));
    }

    renderEnd(event) {
      this.ended = true;
      this.stopReason = safe(event.stop_reason);
      const usage = event.usage && typeof event.usage === "object" ? event.usage : {};
      const limits = event.limits && typeof event.limits === "object" ? event.limits : {};
      const facts = [
        `stop reason ${event.stop_reason}`,
        `${num(usage.model_calls)} model calls`,
        `${num(usage.tool_calls)} tool calls`,
        `${num(usage.input_tokens)} input tokens`,
        `${num(usage.output_tokens)} output tokens`,
      ];
      if (limits.max_steps != null) facts.push(`max steps ${num(limits.max_steps)}`);
      if (limits.token_budget != null) facts.push(`token budget ${num(limits.token_budget)}`);
      this.end.replaceChildren(
        el("section", { class: "block answer", "aria-label": "answer" },
          el("h2", null, "Answer"),
          textBlock("p", "text", event.answer || "(no answer)"),
          el("div", { class: "usage meta", "aria-label": "usage" }, facts.map((f) => el("span", null, f)))),
      );
    }

    showPending(list) {
      const keys = new Set();
      for (const item of list) {
        if (!item || typeof item.key !== "string") continue;
        keys.add(item.key);
        if (!this.shownPending.has(item.key)) {
          const node = this.pendingItem(item);
          this.shownPending.set(item.key, node);
          this.pending.append(node);
        }
      }
      for (const [key, node] of this.shownPending) {
        if (!keys.has(key)) {
          node.remove();
          this.shownPending.delete(key);
        }
      }
    }

    pendingItem(item) {
      const outcome = el("p", { class: "line", tabindex: "-1" });
      const decide = async (decision) => {
        approve.disabled = deny.disabled = true;
        outcome.className = "line";
        outcome.textContent = decision === "approve" ? "Approving…" : "Denying…";
        try {
          const answer = await callTool("app_answer", { run_id: this.runId, key: item.key, decision });
          buttons.remove();
          outcome.className = `line ${decision === "approve" ? "ok" : "error"}`;
          outcome.textContent = safe(answer.answer || (decision === "approve" ? "approved" : "denied"));
          outcome.focus();
          this.kick();
        } catch (err) {
          outcome.className = "line error";
          outcome.textContent = safe(err.message);
          approve.disabled = deny.disabled = false;
        }
      };
      const approve = el("button", { type: "button", class: "primary", onclick: () => decide("approve") }, "Approve");
      const deny = el("button", { type: "button", onclick: () => decide("deny") }, "Deny");
      const buttons = el("div", { class: "bar" }, approve, deny);
      const stepText = typeof item.step === "number" && item.step > 0 ? ` (step ${item.step})` : "";
      return el("div", { class: "approval" },
        el("p", { class: "line" }, "Allow ", el("code", null, item.name), `${stepText}?`),
        textBlock("pre", "", pretty(item.arguments)),
        buttons,
        outcome);
    }
  }

  // ---- the tool selector and the task box

  class ToolsView {
    mount(root) {
      this.statusLine = el("p", { class: "status", role: "status" }, "Loading the tools…");
      this.body = el("div");
      root.append(nav(pageLink("/ui", "Runs")) || "", el("h1", null, "meta-agent tools"), this.taskBox(), this.statusLine, this.body);
      this.load();
    }

    stop() {}

    setStatus(text, cls = "") {
      setStatus(this.statusLine, text, cls);
    }

    taskBox() {
      const modeId = nextId("mode");
      const taskId = nextId("task");
      this.mode = el("select", { id: modeId, disabled: true }, MODES.map((m) => el("option", { value: m }, m)));
      this.mode.addEventListener("change", () => this.setMode());
      this.task = el("textarea", { id: taskId, rows: "3" });
      // A button, not a form's submit: a host's sandbox without allow-forms blocks every form submission.
      this.start = el("button", { type: "button", class: "primary", onclick: () => this.startRun() }, "Start");
      this.task.addEventListener("keydown", (event) => {
        if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
          event.preventDefault();
          this.startRun();
        }
      });
      return el("section", { class: "block", "aria-label": "new run" },
        el("div", { class: "bar" }, el("label", { for: modeId }, "mode"), this.mode),
        el("label", { for: taskId }, "task"),
        this.task,
        el("div", { class: "bar" }, this.start, el("span", { class: "meta" }, "Ctrl+Enter starts too")));
    }

    async load() {
      try {
        const data = await callTool("app_toolbox", {});
        this.setStatus("");
        this.render(data);
      } catch (err) {
        this.setStatus(`The tools could not be read: ${err.message}`, "error");
        this.body.replaceChildren(el("button", { type: "button", onclick: () => this.load() }, "Try again"));
      }
    }

    render(data) {
      if (MODES.includes(data.mode)) this.mode.value = data.mode;
      this.mode.disabled = false;
      this.modeNow = this.mode.value;
      const parts = [];
      const problems = Array.isArray(data.problems) ? data.problems : [];
      if (problems.length) {
        parts.push(el("section", { class: "block", "aria-label": "problems" },
          el("h2", { class: "warn" }, "Problems"), el("ul", null, problems.map((p) => el("li", { class: "text" }, p)))));
      }
      parts.push(this.group("meta-agent", null, Array.isArray(data.internal) ? data.internal : []));
      for (const server of Array.isArray(data.servers) ? data.servers : []) {
        if (server && typeof server === "object") parts.push(this.group(server.name, server, Array.isArray(server.tools) ? server.tools : []));
      }
      this.body.replaceChildren(...parts);
    }

    group(name, server, tools) {
      const head = el("div", { class: "bar" }, el("h2", null, name));
      const section = el("section", { class: "block", "aria-label": safe(name) }, head);
      if (server) {
        head.append(el("span", { class: `badge ${safe(server.status)}` }, server.status));
        if (server.reason) section.append(textBlock("p", "text warn", server.reason));
      }
      if (!tools.length) section.append(el("p", { class: "meta" }, "No tools."));
      for (const tool of tools) if (tool && typeof tool.name === "string") section.append(this.toolRow(tool));
      return section;
    }

    toolRow(tool) {
      const id = nextId("tool");
      const noteId = nextId("note");
      const name = tool.name;
      const row = el("div", { class: "tool" });
      const box = el("input", { type: "checkbox", id, "aria-describedby": noteId });
      const trust = el("select", { class: "trust", "aria-label": `trust for ${name}`, "aria-describedby": noteId },
        TRUST.map((t) => el("option", { value: t }, t)));
      const marks = el("span", { class: "meta" });
      const note = el("span", { id: noteId });
      const problem = el("p", { class: "line error" });
      const showProblem = (text) => {
        problem.textContent = safe(text);
        if (text) problem.setAttribute("role", "alert");
        else problem.removeAttribute("role");
      };
      const about = el("div", { class: "about" }, marks, note, problem);
      if (tool.title) about.prepend(el("p", { class: "line" }, tool.title));
      if (tool.description) about.append(textBlock("p", "line meta text", tool.description));
      row.append(box, el("label", { for: id }, name), trust, about);
      const fill = (now) => {
        row.tool = now;
        box.checked = now.enabled !== false;
        trust.value = TRUST.includes(now.trust) ? now.trust : "ask";
        trust.disabled = Boolean(now.locked);
        row.classList.toggle("unavailable", now.available === false);
        const bits = [];
        if (now.read_only) bits.push("read-only");
        if (now.trust_default && now.trust_default !== now.trust) bits.push(`default trust: ${now.trust_default}`);
        marks.textContent = safe(bits.join(" · ") + (bits.length ? " " : ""));
        const why = [];
        if (now.locked) why.push(`Trust locked: ${now.why_locked || "the operator set it to never"}.`);
        if (now.available === false) why.push(`Unavailable: ${now.why_unavailable || "no reason given"}`);
        note.textContent = safe(why.join(" "));
        note.className = now.available === false || now.locked ? "warn" : "";
      };
      const change = async (args) => {
        row.setAttribute("aria-busy", "true");
        try {
          fill(await callTool("app_set_tool", { name, ...args }));
          showProblem("");
        } catch (err) {
          fill(row.tool);
          showProblem(`Not changed: ${err.message}`);
          this.setStatus(`${name} not changed: ${err.message}`, "error");
        } finally {
          row.removeAttribute("aria-busy");
        }
      };
      box.addEventListener("change", () => change({ enabled: box.checked }));
      trust.addEventListener("change", () => change({ trust: trust.value }));
      fill(tool);
      return row;
    }

    async setMode() {
      const wanted = this.mode.value;
      try {
        const answer = await callTool("app_set_mode", { mode: wanted });
        this.mode.value = MODES.includes(answer.mode) ? answer.mode : wanted;
        this.modeNow = this.mode.value;
        this.setStatus(`Mode: ${this.mode.value}`);
      } catch (err) {
        this.mode.value = this.modeNow || "agent";
        this.setStatus(`The mode could not be set: ${err.message}`, "error");
      }
    }

    async startRun() {
      if (this.start.disabled) return;
      const task = this.task.value.trim();
      if (!task) {
        this.setStatus("Write a task first.", "error");
        this.task.focus();
        return;
      }
      this.start.disabled = true;
      try {
        const answer = await callTool("app_start", { task, mode: this.mode.value });
        if (typeof answer.run_id !== "string" || !answer.run_id) throw new Error("app_start named no run.");
        app.show(new RunView({ runId: answer.run_id, task, back: () => app.show(new ToolsView()) }));
      } catch (err) {
        this.setStatus(`The run could not start: ${err.message}`, "error");
        this.start.disabled = false;
      }
    }
  }

  // ---- the console's runs list

  class RunsView {
    mount(root) {
      this.statusLine = el("p", { class: "status", role: "status" }, "Loading the runs…");
      this.table = el("div");
      this.timer = null;
      root.append(nav(pageLink("/ui/tools", "Tools")) || "",
        el("div", { class: "bar" }, el("h1", null, "meta-agent runs"),
          el("button", { type: "button", onclick: () => this.load() }, "Refresh")),
        this.statusLine, this.table);
      this.load();
    }

    stop() {
      clearTimeout(this.timer);
      this.stopped = true;
    }

    async load() {
      clearTimeout(this.timer);
      try {
        const data = await callTool("app_runs", { limit: 100 });
        const runs = Array.isArray(data.runs) ? data.runs.filter((r) => r && typeof r === "object") : [];
        this.render(runs);
        setStatus(this.statusLine, runs.length ? `${runs.length} runs` : "No runs yet.", "");
        if (!this.stopped && runs.some((r) => r.status === "running")) this.timer = setTimeout(() => this.load(), RUNS_REFRESH_MS);
      } catch (err) {
        setStatus(this.statusLine, `The runs could not be read: ${err.message}`, "error");
      }
    }

    render(runs) {
      const head = el("tr", null, ["run", "task", "mode", "status", "started"].map((h) => el("th", { scope: "col" }, h)));
      const rows = runs.map((run) => {
        const live = run.status === "running";
        return el("tr", null,
          el("td", { class: "mono" }, runLink(String(run.run_id ?? ""))),
          el("td", { class: "task" }, textBlock("span", "text", run.task)),
          el("td", null, run.mode),
          el("td", null, el("span", { class: `badge ${live ? "live" : safe(run.status)}` }, live ? "live" : run.status)),
          el("td", { class: "meta" }, run.started));
      });
      this.table.replaceChildren(el("table", null, el("thead", null, head), el("tbody", null, rows)));
    }
  }

  // ---- start

  const root = document.getElementById("app") || document.body;

  const app = {
    view: null,
    show(view) {
      this.view?.stop();
      root.replaceChildren();
      this.view = view;
      view.mount(root);
    },
    teardown() {
      this.view?.stop();
    },
    forward(method, params) {
      this.view?.[method]?.(params);
    },
  };

  bridge.on("ui/notifications/tool-input", (p) => app.forward("toolInput", p.arguments || {}));
  bridge.on("ui/notifications/tool-result", (p) => app.forward("toolResult", p));
  bridge.on("ui/notifications/tool-cancelled", (p) => app.forward("cancelled", p.reason));
  bridge.on("ui/notifications/host-context-changed", (p) => applyContext(p));

  function firstView(ctx) {
    const view = document.body.dataset.view;
    if (view === "tools") return new ToolsView();
    if (view === "runs") return new RunsView();
    if (inHost) {
      const info = ctx.toolInfo;
      const id = info && (typeof info.id === "string" || typeof info.id === "number") ? info.id : null;
      return new RunView({ requestId: id });
    }
    const last = decodeURIComponent(window.location.pathname.split("/").filter(Boolean).pop() || "");
    return new RunView({ runId: RUN_ID.test(last) ? last : null });
  }

  async function main() {
    applyTheme();
    let ctx = {};
    try {
      ctx = await bridge.start();
    } catch (err) {
      root.replaceChildren(el("p", { class: "status error", role: "status" }, `The host did not connect: ${err.message}`));
      return;
    }
    applyContext(ctx);
    const view = firstView(ctx);
    app.show(view);
    if (view instanceof RunView && !inHost && !view.runId) {
      view.stop();
      view.setStatus("This address names no run.", "error");
    }
    if (inHost) reportSize();
  }

  main();
})();
