// The console's list of runs.
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
