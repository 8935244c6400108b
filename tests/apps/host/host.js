// A test host for MCP Apps: the ext-apps SDK's own AppBridge, as a real host embeds it, talking to an app in a
// sandboxed iframe. esbuild bundles this file into one script (tests/fixtures/app_host.py); the Python side answers
// the app's requests through functions Playwright exposes on this page (window.__host*).
import { AppBridge, PostMessageTransport } from "@modelcontextprotocol/ext-apps/app-bridge";

// What proves the app needs no network: nothing but its own inline script and style, and data: images.
const CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:";

function withCsp(html) {
  const meta = `<meta http-equiv="Content-Security-Policy" content="${CSP}">`;
  const head = /<head[^>]*>/i.exec(html);
  if (!head) throw new Error("the app's document has no <head>");
  const at = head.index + head[0].length;
  return html.slice(0, at) + meta + html.slice(at);
}

const state = { bridge: null, iframe: null, context: {}, initialized: false, sizes: [] };

async function mount(html, hostContext) {
  const iframe = document.createElement("iframe");
  iframe.setAttribute("sandbox", "allow-scripts");
  iframe.setAttribute("title", "app");
  iframe.style.width = "800px";
  iframe.style.height = "600px";
  iframe.style.border = "0";
  document.body.appendChild(iframe);
  const bridge = new AppBridge(
    null,
    { name: "meta-agent-test-host", version: "1" },
    { serverTools: {}, serverResources: {}, openLinks: {} },
    { hostContext },
  );
  bridge.oncalltool = (params) => window.__hostCallTool(params);
  bridge.onreadresource = (params) => window.__hostReadResource(params);
  bridge.onopenlink = async (params) => {
    await window.__hostOpenLink(params);
    return {};
  };
  bridge.onsizechange = (params) => {
    state.sizes.push(params);
    if (typeof params.height === "number") iframe.style.height = `${Math.max(100, Math.min(params.height, 4000))}px`;
  };
  bridge.oninitialized = () => {
    state.initialized = true;
  };
  await bridge.connect(new PostMessageTransport(iframe.contentWindow, iframe.contentWindow));
  state.bridge = bridge;
  state.context = hostContext;
  state.iframe = iframe;
  iframe.srcdoc = withCsp(html);
}

window.host = {
  mount,
  state,
  initialized: () => state.initialized,
  toolInput: (args) => state.bridge.sendToolInput({ arguments: args }),
  toolResult: (result) => state.bridge.sendToolResult(result),
  toolCancelled: (reason) => state.bridge.sendToolCancelled(reason == null ? {} : { reason }),
  // The host's context changes (a theme switch): the bridge sends the view what changed.
  setContext: (changes) => {
    state.context = { ...state.context, ...changes };
    state.bridge.setHostContext(state.context);
  },
  teardown: () => state.bridge.teardownResource({}),
};
