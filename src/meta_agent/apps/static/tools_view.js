// The tool selector and the task box.
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
