"""The critic's side of the loop: the loop's judge (`research.judge`) over each attempt's summary and original
passages, and once more over the final answer (reduce) against every passage the approved steps retrieved.

Every verdict is audited on the way in (awarl.critic.audit, through `safe_verify`): approval reads the
groundedness recounted from the claims, never the judge's own figure. Then the loop reads the sources itself
(awarl/research/checks.py): a claim of the answer the verdict leaves out is added as unsupported, and the
conflicts the passages show join the judge's typed ones (issue 43). The gold judge reads the dataset's gold
evidence: it is an ORACLE for the loop, labelled so wherever its verdicts are used (`judge_label`), and its
claims (gold facts) are never quoted back to the executor or in a gap (`claims_to_name`).
"""

from __future__ import annotations

from collections.abc import Sequence

from awarl.agent.rollout import Trajectory
from awarl.config import CriticConfig
from awarl.critic import is_oracle
from awarl.critic.schema import CriticInput, CriticOutput, Judge, PassageRef
from awarl.data.evidence import GoldEvidence, gold_evidence
from awarl.data.types import QAExample
from awarl.research.checks import complete, merge_conflicts, source_conflicts
from awarl.research.schema import ExecutorResult
from awarl.rewards.citation import safe_verify


def judge_name(judge: Judge, item: CriticInput) -> str:
    """The judge that gives this item's verdict: the gold judge routes items without evidence to its fallback."""
    route = getattr(judge, "route", None)
    return str((route(item) if route else None) or getattr(judge, "name", type(judge).__name__))


def judge_label(name: str) -> str:
    """A judge's name as results show it: an oracle (the gold judge) is marked as the oracle it is."""
    return f"{name} (oracle)" if is_oracle(name) else name


def verify(judge: Judge | None, inputs: Sequence[CriticInput]) -> list[tuple[CriticOutput | None, str]]:
    """(audited verdict or None, judge name) per input. A judge never fails the loop: an unverified attempt is
    simply not approved."""
    if not inputs:
        return []
    if judge is None:
        return [(None, "none")] * len(inputs)
    verdicts = safe_verify(judge, inputs, "research critic")[0]
    out = []
    for v, inp in zip(verdicts, inputs, strict=True):
        name = judge_name(judge, inp)
        out.append((None if v is None else read_sources(v, inp, name, getattr(judge, "cfg", None)), name))
    return out


def read_sources(verdict: CriticOutput, item: CriticInput, judge: str, cfg: CriticConfig | None = None) -> CriticOutput:
    """The audited verdict completed by the loop's own reading (module docstring): omitted claims added as
    unsupported (not under the oracle, whose claims are gold facts), the passages' conflicts merged in."""
    kw = {"short_answer_words": cfg.short_answer_words} if cfg is not None else {}
    if not is_oracle(judge):
        verdict = complete(verdict, item, **kw)
    found = source_conflicts(item, cfg) if cfg is not None else source_conflicts(item)
    conflicts = merge_conflicts(verdict.conflicts, found)
    return verdict if len(conflicts) == len(verdict.conflicts) else verdict.model_copy(update={"conflicts": conflicts})


def nothing_to_verify() -> CriticOutput:
    """The verdict of an attempt without an answer (an abstention, an invalid trajectory): no claims, nothing
    grounded; the judge is not asked (an abstention phrase is not a claim about the sources)."""
    return CriticOutput(verified_claims=[], overall_groundedness=0.0, flags=[], reported_groundedness=0.0)


def answered(traj: Trajectory) -> bool:
    p = traj.parsed
    return bool(p.valid and not p.abstained and (p.answer or "").strip())


def own_answer(result: ExecutorResult) -> str:
    """The executor's answer as a claim it made: empty for an abstention or an invalid trajectory."""
    return "" if result.abstained or not result.valid else result.summary


def unsupported_claims(verdict: CriticOutput | None) -> list[str]:
    """The claims the sources did not ground: unsupported, and inferred (stated by no passage)."""
    return [c.claim for c in verdict.verified_claims if c.status != "grounded"] if verdict else []


def claims_to_name(verdict: CriticOutput | None, judge: str, answer: str) -> list[str]:
    """What a re-query or a gap may name as unsupported: the claims of the answer, or, under the oracle (whose
    claims are the dataset's gold facts, the answer itself), only the executor's own answer."""
    if is_oracle(judge):
        return [answer] if answer.strip() else []
    return unsupported_claims(verdict)


def step_gold(example: QAExample | None, n_steps: int) -> list[GoldEvidence | None]:
    """The gold evidence each step of a plan is checked against by the gold judge: a decomposed question's hop k
    against hop k's supporting paragraph, another plan's steps against the whole question's evidence; None where
    the record has none (then the judge's fallback, if any, decides)."""
    if not isinstance(example, QAExample):
        return [None] * n_steps
    ev = gold_evidence(example)
    if not ev.paragraphs:
        return [None] * n_steps
    if n_steps == 1 or len(ev.hops) != n_steps:
        return [ev] * n_steps
    out: list[GoldEvidence | None] = []
    for hop in ev.hops:
        paras = tuple(p for p in ev.paragraphs if hop.passage_id and p.passage_id == hop.passage_id)
        out.append(GoldEvidence(paragraphs=paras) if paras else ev)
    return out


def passage_refs(passages: Sequence[dict]) -> list[PassageRef]:
    """Passages renumbered 1..n in order of first retrieval (ids kept, so a claim still maps to its passage)."""
    seen: dict[str, PassageRef] = {}
    for d in passages:
        pid = str(d["id"])
        if pid not in seen:
            seen[pid] = PassageRef(number=len(seen) + 1, id=pid, title=str(d.get("title") or ""), text=str(d["text"]))
    return list(seen.values())


def synthesis_input(question: str, answer: str, refs: Sequence[PassageRef], cited_ids: set[str],
                    gold: GoldEvidence | None = None) -> CriticInput:
    """The final pass: an answer against every passage of the approved steps."""
    return CriticInput(question=question, answer=answer, cited=[p for p in refs if p.id in cited_ids],
                       passages=list(refs), gold=gold)
