"""Model providers: one module per wire format behind one `Provider` protocol, resolved from `provider:model`.

model_setting.py     META_AGENT_MODEL read and checked without a vendor SDK; the model used where none is set
factory.py           `make_provider`: the provider a `provider:model` names (the vendor SDK is imported there)
chain.py             the models of a run, made once, with the fallback chain
openai.py            Chat Completions (openai:, ollama:, gemini:)
openai_responses.py  the Responses API (openai: against OpenAI itself)
anthropic.py         Messages with tools (anthropic:)
sampling.py          the host's own model through MCP sampling
wire.py              what the wire formats share: the SDKs' transport, their errors in one line, answers checked
scripted.py          the test double
"""
