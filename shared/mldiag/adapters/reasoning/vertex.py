"""Gemini on Vertex AI as the reasoner, through ``google-genai``.

Two phases, each a plain ``generateContent`` call:

1. **Investigation**: the evidence (fenced, :mod:`mldiag.analysis.reasoning.prompts`) and
   the follow-up tools as function declarations. Each function call the model
   makes goes through :class:`~mldiag.analysis.reasoning.followups.FollowupTools`, which
   refuses unknown tools, arguments that name nothing in the profile, and
   anything past the fourth follow-up; the model gets the result or the
   refusal back. This ends when the model calls no tool, after
   :data:`MAX_TURNS` rounds, or when no follow-up is left.
2. **Conclusion**: the evidence and the follow-ups' results in one message,
   answered as JSON in the :class:`ModelAnswer` schema (no tools: a JSON
   response schema and function calling do not mix on every Gemini model).

Each request has a timeout and google-genai's retries with exponential backoff
on 408, 429 and 5xx; the whole investigation has a deadline and a token
budget. Any failure raises :class:`~mldiag.analysis.reasoning.investigation.ReasonerFailed`
with a one-line reason, and the investigation falls back to the offline
reasoner. ``google-genai`` is imported only here, when a Vertex reasoner runs.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from mldiag.analysis.evidence import Analysis
from mldiag.analysis.reasoning import prompts
from mldiag.analysis.reasoning.followups import TOOL_SPECS, FollowupTools, Refused, ToolSpec
from mldiag.analysis.reasoning.investigation import Conclusion, ReasonerFailed
from mldiag.config import Settings
from mldiag.domain.resources import Finding, FindingCategory

MAX_TURNS = 6
MAX_FINDINGS = 10
MAX_EVIDENCE_LINES = 10
DEFAULT_TOKEN_BUDGET = 300_000
RETRIED_STATUSES = [408, 429, 500, 502, 503, 504]
_TEXT_LIMITS = {"title": 200, "what": 2000, "impact": 1000, "fix": 1500}
_SCHEMA_TYPES = {str: "STRING", int: "INTEGER", list: "ARRAY"}


class ModelFinding(BaseModel):
    priority: Literal["P0", "P1", "P2"]
    category: Literal[tuple(c.value for c in FindingCategory)]  # type: ignore[valid-type]
    title: str
    what: str
    evidence: list[str]
    impact: str
    fix: str

    def finding(self) -> Finding:
        cut = {name: getattr(self, name)[:limit] for name, limit in _TEXT_LIMITS.items()}
        return Finding(priority=self.priority, category=self.category,
                       evidence=[line[:500] for line in self.evidence[:MAX_EVIDENCE_LINES]], **cut)


class ModelAnswer(BaseModel):
    """The JSON response schema of the conclusion."""

    summary: str
    hypotheses: list[str] = Field(default_factory=list)
    findings: list[ModelFinding]


def declaration(spec: ToolSpec) -> dict[str, Any]:
    """A follow-up tool as a Gemini function declaration (OpenAPI schema subset)."""
    properties: dict[str, Any] = {}
    for parameter in spec.parameters:
        schema: dict[str, Any] = {"type": _SCHEMA_TYPES[parameter.kind], "description": parameter.description}
        if parameter.choices:
            schema["enum"] = list(parameter.choices)
        if parameter.kind is int:
            schema["minimum"], schema["maximum"] = parameter.bounds
        if parameter.kind is list:
            schema["items"] = {"type": "STRING"}
        properties[parameter.name] = schema
    return {"name": spec.name, "description": spec.description,
            "parameters": {"type": "OBJECT", "properties": properties,
                           "required": [p.name for p in spec.parameters if p.required]}}


def _reason(error: BaseException, timeout_s: float) -> str:
    """A failure as one line for the report."""
    from google.genai import errors

    if isinstance(error, errors.APIError):
        return f"{error.code} {error.status or ''}: {str(error.message or '')[:200]}".replace("  ", " ")
    name = type(error).__name__
    if "Timeout" in name:
        return f"no answer within {timeout_s:g} s ({name})"
    return f"{name}: {str(error)[:200]}"


class VertexReasoner:
    """Gemini on Vertex AI: function calling over the follow-up tools, then a JSON conclusion."""

    name = "vertex"

    def __init__(self, *, project: str, location: str, model: str, endpoint: str = "", credentials: Any = None,
                 request_timeout_s: float = 60.0, attempts: int = 3, retry_initial_delay_s: float = 1.0,
                 token_budget: int = DEFAULT_TOKEN_BUDGET, deadline_s: float = 240.0, max_turns: int = MAX_TURNS):
        self.project, self.location, self.model, self.endpoint = project, location, model, endpoint
        self.credentials = credentials  # None: Application Default Credentials
        self.request_timeout_s, self.attempts = request_timeout_s, attempts
        self.retry_initial_delay_s = retry_initial_delay_s
        self.token_budget, self.deadline_s, self.max_turns = token_budget, deadline_s, max_turns
        self.tokens = 0
        self._deadline = 0.0

    @classmethod
    def from_settings(cls, settings: Settings) -> VertexReasoner:
        return cls(project=settings.project, location=settings.vertex_location, model=settings.vertex_model,
                   endpoint=settings.vertex_endpoint)

    def investigate(self, analysis: Analysis, tools: FollowupTools) -> Conclusion:
        self.tokens = 0
        self._deadline = time.monotonic() + self.deadline_s
        try:
            return self._investigate(analysis, tools)
        except ReasonerFailed:
            raise
        except Exception as error:  # noqa: BLE001 - whatever went wrong, the report says it in one line
            raise ReasonerFailed(f"Vertex AI {self.model}: {_reason(error, self.request_timeout_s)}",
                                 self.tokens) from error

    def _client(self) -> Any:
        from google import genai
        from google.genai import types

        return genai.Client(
            vertexai=True, project=self.project, location=self.location, credentials=self.credentials,
            http_options=types.HttpOptions(
                base_url=self.endpoint or None,
                timeout=int(self.request_timeout_s * 1000),
                retry_options=types.HttpRetryOptions(
                    attempts=self.attempts, initial_delay=self.retry_initial_delay_s, max_delay=30.0,
                    jitter=self.retry_initial_delay_s, http_status_codes=RETRIED_STATUSES),
            ),
        )

    def _generate(self, client: Any, contents: list[Any], config: Any) -> Any:
        if self.tokens >= self.token_budget:
            raise ReasonerFailed(f"Vertex AI {self.model}: the token budget of {self.token_budget} is spent "
                                 f"({self.tokens} tokens)", self.tokens)
        if time.monotonic() > self._deadline:
            raise ReasonerFailed(f"Vertex AI {self.model}: no conclusion within {self.deadline_s:g} s", self.tokens)
        response = client.models.generate_content(model=self.model, contents=contents, config=config)
        usage = response.usage_metadata
        self.tokens += (usage.total_token_count or 0) if usage is not None else 0
        return response

    def _investigate(self, analysis: Analysis, tools: FollowupTools) -> Conclusion:
        from google.genai import types

        client = self._client()
        nonce = prompts.new_nonce()
        modules = sorted(tools.catalogue.modules)
        investigating = types.GenerateContentConfig(
            system_instruction=prompts.SYSTEM_INSTRUCTION,
            tools=[types.Tool(function_declarations=[declaration(spec) for spec in TOOL_SPECS.values()])],
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
            temperature=0.2,
        )
        contents: list[Any] = [types.Content(role="user", parts=[
            types.Part.from_text(text=prompts.evidence_message(analysis, modules, nonce))])]
        for _ in range(self.max_turns):
            response = self._generate(client, contents, investigating)
            calls = response.function_calls or []
            if not calls or not response.candidates:
                break
            contents.append(response.candidates[0].content)
            replies = []
            for call in calls:
                try:
                    reply = prompts.tool_reply(tools.run(str(call.name), dict(call.args or {})), nonce)
                except Refused as refused:  # the reason may quote what the model proposed: data too
                    reply = {"refused": prompts.fenced("TOOL-OUTPUT", str(refused), nonce)}
                replies.append(types.Part.from_function_response(name=str(call.name), response=reply))
            contents.append(types.Content(role="user", parts=replies))
            if tools.remaining <= 0:
                break
        concluding = types.GenerateContentConfig(
            system_instruction=prompts.SYSTEM_INSTRUCTION, temperature=0.2,
            response_mime_type="application/json", response_schema=ModelAnswer,
        )
        final = self._generate(client, [types.Content(role="user", parts=[types.Part.from_text(
            text=prompts.final_message(analysis, modules, tools.followups, nonce))])], concluding)
        try:
            answer = ModelAnswer.model_validate_json(final.text or "")
        except ValidationError as error:
            raise ReasonerFailed(f"Vertex AI {self.model}: the conclusion does not match the schema "
                                 f"({error.error_count()} errors, first: {error.errors()[0]['msg']})",
                                 self.tokens) from None
        return Conclusion(
            findings=[finding.finding() for finding in answer.findings[:MAX_FINDINGS]],
            summary=answer.summary,
            hypotheses=answer.hypotheses[:MAX_FINDINGS],
            model=self.model,
            tokens=self.tokens,
        )
