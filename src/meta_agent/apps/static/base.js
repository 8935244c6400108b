// The views' ground: limits, text shown as text, the two bridges (a host's postMessage, the console's fetch),
// the theme and the size.
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
