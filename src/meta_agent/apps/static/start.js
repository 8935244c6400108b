// Which view a page starts with, and the start.
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
