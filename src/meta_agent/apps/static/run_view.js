// The run view: a run's events read after a cursor, shown step by step, its approvals answered.
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
