"""Agreement of the lexical citation judge with the gold-evidence judge on the shipped dev samples.

For every question of the three shipped dev samples (HotpotQA 200, 2WikiMultiHopQA 164, MuSiQue 200): a
trajectory of two BM25 searches over the shipped closed corpus (the question, then the title of its first
gold paragraph; top 3 each, numbered 1-6), answered with the gold answer, under two citation choices: every
shown passage, and the first passage of each search. Both judges score it through `citation_reward`;
reported per dataset:
- passage agreement: share of cited passages that both judges call supporting, or both redundant;
- the lexical judge's supporting calls against the gold labels: precision (of the passages it calls
  supporting, share that are gold) and recall (of the cited gold passages, share it calls supporting);
- mean |Δ r_cite| between the judges, and each judge's mean r_cite;
- distractors that pay: citing exactly the shown passages the gold judge calls supporting, then adding one
  shown passage it does not, share of those (question, passage) pairs where the lexical r_cite goes up
  (the gold judge's never does: an added non-gold citation is redundant);
- the answers themselves (issue 43), citing every shown passage: the share of questions whose GOLD answer the
  lexical judge grounds (every claim grounded), the same over the questions whose every gold paragraph was
  shown (the evidence is there to be read), and, on the same trajectory, the share whose WRONG answer it
  grounds: a value or name of the same kind taken from the shown gold passages (another date or amount of
  the gold paragraph, another name it gives, `no` for `yes`), never the gold answer nor a name of the
  question: the contradiction set of real shipped questions and passages. Lower is better; the gold judge
  grades evidence, not answers, so it would ground every one.

    python benchmarks/judge_agreement.py [--out docs/benchmarks.md] [--before FILE --before-label TEXT ...]
        [--lexical-from FILE]
    python benchmarks/judge_agreement.py --llm-url http://127.0.0.1:8001/v1 --llm-model MODEL [--llm-limit 4] \
        [--out docs/benchmarks.md]

`--out` writes (or replaces) the "Citation judges" section of that file. `--before FILE` (repeatable, each with
a `--before-label` for the docs) also measures the LexicalJudge of another file (an older version: `git show
COMMIT:awarl/critic/lexical_judge.py > FILE`) the same way, for before/after tables; `--lexical-from FILE`
measures that file's judge instead of this one. `--llm-url`/`--llm-model` measure an LLM judge (critic.judge:
openai; e.g. SmolLM2-135M-Instruct served by `scripts/serve_judge.sh --cpu`) the same way on the first
`--llm-limit` questions of each dataset, next to the lexical judge on those same questions, into a section of its
own ("Citation judges: an LLM judge"); the distractor count is the lexical judge's only.
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import shlex
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from awarl.config import CriticConfig  # noqa: E402
from awarl.critic.claims import names  # noqa: E402
from awarl.critic.gold_judge import gold_matches, gold_verdict  # noqa: E402
from awarl.critic.lexical_judge import LexicalJudge  # noqa: E402
from awarl.critic.schema import PassageRef  # noqa: E402
from awarl.critic.tokens import tokens  # noqa: E402
from awarl.critic.values import read_values  # noqa: E402
from awarl.data.corpus import shipped_closed_corpus  # noqa: E402
from awarl.data.evidence import gold_evidence  # noqa: E402
from awarl.data.loaders import load_shipped  # noqa: E402
from awarl.retrieval import build_index, load_index  # noqa: E402
from awarl.rewards.citation import build_critic_input, citation_reward  # noqa: E402

START, END = "<!-- judge-agreement:start -->", "<!-- judge-agreement:end -->"
LLM_START, LLM_END = "<!-- judge-agreement-llm:start -->", "<!-- judge-agreement-llm:end -->"
DATASETS = ("hotpotqa", "2wikimultihopqa", "musique")


def trajectory(retriever, ex) -> tuple[list[PassageRef], dict[str, list[int]]]:
    ev = gold_evidence(ex)
    first = retriever.search([ex.question], 3)[0]
    second = retriever.search([ev.paragraphs[0].title], 3)[0]
    refs = [PassageRef(number=i + 1, id=p.id, title=p.title, text=p.text) for i, p in enumerate(first + second)]
    return refs, {"all shown": [p.number for p in refs], "first of each search": [1, len(first) + 1]}


def measure(judge, retriever, limit: int | None = None, distractor_count: bool = True) -> tuple[dict[str, dict], float]:
    out: dict[str, dict] = {}
    t_judge = 0.0
    for name in DATASETS:
        acc: dict[str, Any] = {"agree": 0, "cited": 0, "lex_sup": 0, "lex_sup_gold": 0, "gold_cited": 0, "gold_found": 0,
               "diff": [], "r_lex": [], "r_gold": [], "pairs": 0, "paid": 0, "failed": 0,
               "gold_answers": 0, "gold_grounded": 0, "wrong_answers": 0, "wrong_grounded": 0,
               "shown_answers": 0, "shown_grounded": 0}
        for ex in load_shipped(name)[:limit]:
            ev = gold_evidence(ex)
            refs, choices = trajectory(retriever, ex)
            if distractor_count:
                distractors(judge, ex, ev, refs, acc)
            answers_grounded(judge, ex, ev, refs, acc)
            for cites in choices.values():
                item = build_critic_input(ex.question, ex.answers[0], cites, refs)
                t0 = time.perf_counter()
                lv = judge.verify([item])[0]
                t_judge += time.perf_counter() - t0
                if lv is None:  # an LLM judge that failed (no schema-valid verdict): counted, not scored
                    acc["failed"] += 1
                    continue
                lex = citation_reward(lv, cites, refs)
                gold = citation_reward(gold_verdict(ev, refs, item.cited), cites, refs)
                for n in cites:
                    mine, theirs = n in lex.supporting, n in gold.supporting
                    acc["cited"] += 1
                    acc["agree"] += mine == theirs
                    acc["lex_sup"] += mine
                    acc["lex_sup_gold"] += mine and theirs
                    acc["gold_cited"] += theirs
                    acc["gold_found"] += mine and theirs
                acc["diff"].append(abs(lex.reward - gold.reward))
                acc["r_lex"].append(lex.reward)
                acc["r_gold"].append(gold.reward)
        out[name] = acc
    return out, t_judge


def distractors(judge, ex, ev, refs: list[PassageRef], acc: dict) -> None:
    """Count the (question, non-gold passage) pairs where adding the passage to the gold citations raises the
    lexical r_cite."""
    shown = [p.number for p in refs]
    gold = citation_reward(gold_verdict(ev, refs, refs), shown, refs).supporting
    if not gold:
        return
    cites = list(gold)
    base = citation_reward(judge.verify([build_critic_input(ex.question, ex.answers[0], cites, refs)])[0],
                           cites, refs).reward
    for n in shown:
        if n in gold:
            continue
        more = [*cites, n]
        r = citation_reward(judge.verify([build_critic_input(ex.question, ex.answers[0], more, refs)])[0],
                            more, refs).reward
        acc["pairs"] += 1
        acc["paid"] += r > base + 1e-9


def _grounded(judge, question: str, answer: str, refs: list[PassageRef]) -> bool | None:
    v = judge.verify([build_critic_input(question, answer, [p.number for p in refs], refs)])[0]
    if v is None:
        return None
    return bool(v.verified_claims) and all(c.status == "grounded" for c in v.verified_claims)


def wrong_answer(ex, ev, refs: list[PassageRef]) -> str | None:
    """A wrong answer of the gold answer's kind from the shown gold passages (module docstring), or None."""
    gold = ex.answers[0]
    low = gold.strip().lower()
    if low in ("yes", "no"):
        return "no" if low == "yes" else "yes"
    gold_refs = [p for p in refs if gold_matches(ev, p.id, p.title)] or refs
    want = read_values(gold)
    avoid = set(tokens(ex.question)) | {t for a in ex.answers for t in tokens(a)}
    for p in gold_refs:
        if want:
            for v in read_values(p.text):
                if v.comparable(want[0]) and not any(v.agrees(w) for a in ex.answers for w in read_values(a)):
                    return v.text
        else:
            for n in names(p.text):
                if not set(n) & avoid and not set(n) & set(tokens(p.title)) and _like(n, tokens(gold)):
                    return " ".join(w.capitalize() for w in n)
    return None


def _like(name: tuple[str, ...], gold: list[str]) -> bool:
    """A name that can stand for the gold one: as many words (give or take one), never a lone nationality
    word ("Irish", "Italian": an adjective, not an entity)."""
    if len(name) == 1 and name[0].endswith(("ish", "ian", "ese", "can", "ch")):
        return False
    return abs(len(name) - len(gold)) <= 1


def answers_grounded(judge, ex, ev, refs: list[PassageRef], acc: dict) -> None:
    """The answers themselves (module docstring): the gold answer, and a wrong one from the gold passages."""
    got = _grounded(judge, ex.question, ex.answers[0], refs)
    if got is not None:
        acc["gold_answers"] += 1
        acc["gold_grounded"] += got
        shown = {k for p in refs for k in gold_matches(ev, p.id, p.title)}
        if len(shown) == len(ev.paragraphs):  # every gold paragraph was retrieved: the answer is there
            acc["shown_answers"] += 1
            acc["shown_grounded"] += got
    wrong = wrong_answer(ex, ev, refs)
    if wrong:
        got = _grounded(judge, ex.question, wrong, refs)
        if got is not None:
            acc["wrong_answers"] += 1
            acc["wrong_grounded"] += got


def rows(res: dict[str, dict]) -> list[list[str]]:
    table = []
    for name, a in res.items():
        n = max(len(a["diff"]), 1)
        table.append([name, str(n // 2), str(a["cited"]), f"{a['agree'] / max(a['cited'], 1):.3f}",
                      f"{a['lex_sup_gold'] / max(a['lex_sup'], 1):.3f}", f"{a['gold_found'] / max(a['gold_cited'], 1):.3f}",
                      f"{sum(a['diff']) / n:.3f}", f"{sum(a['r_lex']) / n:.3f}", f"{sum(a['r_gold']) / n:.3f}",
                      f"{a['paid'] / a['pairs']:.3f} ({a['paid']}/{a['pairs']})" if a["pairs"] else "—",
                      _share(a["gold_grounded"], a["gold_answers"]), _share(a["shown_grounded"], a["shown_answers"]),
                      _share(a["wrong_grounded"], a["wrong_answers"])])
    return table


def _share(k: int, n: int) -> str:
    return f"{k / n:.3f} ({k}/{n})" if n else "—"


HEAD = ["dataset", "questions", "cited passages", "passage agreement", "lexical support precision",
        "lexical support recall", "mean abs diff r_cite", "r_cite lexical", "r_cite gold",
        "distractors that pay (lexical)", "gold answer grounded", "gold answer grounded, its evidence shown",
        "wrong answer grounded"]


def markdown(table: list[list[str]], before: list[tuple[str, list[list[str]]]], secs: float, n_items: int,
             command: str) -> str:
    lines = [START, "## Citation judges: lexical vs gold evidence (issues 12, 22, 43)", "",
             f"Date: {date.today().isoformat()}. Machine: 2 CPU cores, 24 GiB, no GPU ({platform.machine()}, Python "
             f"{platform.python_version()}). Command: `{command}`.",
             "", "Every question of the three shipped dev samples; a trajectory of two BM25 searches over the shipped "
             "closed corpus (the question, then the title of its first gold paragraph; top 3 each), answered with "
             "the gold answer; two citation choices per question (every shown passage; the first passage of each "
             "search). Passage agreement: cited passages both judges call supporting, or both redundant. Lexical "
             "support precision / recall: its supporting calls against the gold labels. Distractors that pay: "
             "citing exactly the shown passages the gold judge calls supporting, plus one shown passage it does "
             "not, share of those (question, passage) pairs where the lexical r_cite rises above citing the gold "
             "ones alone (for the gold judge it never does). The answers themselves (issue 43), citing every shown "
             "passage: gold answer grounded (every claim), the same over the questions whose every gold paragraph "
             "was shown, and wrong answer grounded: a value or name of the gold answer's kind taken from the shown "
             "gold passages (another date or amount, another name, `no` for `yes`; never the gold answer nor a name "
             "of the question), the contradiction set of real shipped questions; lower is better (the gold judge "
             "grades evidence, not answers: it would ground every one).", "",
             "| " + " | ".join(HEAD) + " |", "|---|" + "---:|" * (len(HEAD) - 1)]
    lines += ["| " + " | ".join(r) + " |" for r in table]
    for label, old in before:
        lines += ["", f"{label}, same trajectories:", "", "| " + " | ".join(HEAD) + " |",
                  "|---|" + "---:|" * (len(HEAD) - 1)]
        lines += ["| " + " | ".join(r) + " |" for r in old]
    lines += ["", f"The lexical judge took {1000 * secs / n_items:.2f} ms per answer on average here."]
    lines.append(END)
    return "\n".join(lines) + "\n"


def llm_markdown(tables: dict[str, list[list[str]]], failed: int, n_items: int, model: str, secs: float) -> str:
    lines = [LLM_START, "## Citation judges: an LLM judge vs gold evidence (issue 23)", "",
             f"Date: {date.today().isoformat()}. Machine: 2 CPU cores (shared), 24 GiB, no GPU ({platform.machine()}, "
             f"Python {platform.python_version()}). The LLM judge: `{model}` (critic.judge: openai) served by "
             "`scripts/serve_judge.sh --cpu` (vLLM's CPU build, json_schema structured outputs); command: `python "
             "benchmarks/judge_agreement.py --llm-url URL --llm-model MODEL --llm-limit N --out docs/benchmarks.md`. "
             "The same trajectories and columns as the table above, on the first N questions of each dataset; the "
             "\"lexical\" columns hold the judge of that row.", ""]
    for label, table in tables.items():
        lines += [f"**{label}**", "", "| " + " | ".join(HEAD) + " |", "|---|" + "---:|" * (len(HEAD) - 1)]
        lines += ["| " + " | ".join(r) + " |" for r in table] + [""]
    lines += [f"The LLM judge failed (no schema-valid verdict) on {failed} of {n_items} answers and took "
              f"{secs / max(n_items, 1):.1f} s per answer.", LLM_END]
    return "\n".join(lines) + "\n"


def replace_block(path: Path, block: str, start: str, end: str) -> None:
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    if start in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end) + 1:]
    else:
        text = text.rstrip("\n") + "\n\n" + block
    path.write_text(text)


def run_llm(args: argparse.Namespace, retriever) -> None:
    from awarl.critic.openai_judge import OpenAIJudge

    cfg = CriticConfig(judge="openai", base_url=args.llm_url, model=args.llm_model, retries=1, timeout_s=300)
    with tempfile.TemporaryDirectory() as cache:
        llm = OpenAIJudge(cfg, cache_dir=cache)
        res, secs = measure(llm, retriever, args.llm_limit, distractor_count=False)
        llm.close()
    lex, _ = measure(load_lexical(None), retriever, args.llm_limit, distractor_count=False)
    tables = {f"LLM judge ({args.llm_model})": rows(res), "lexical judge, same questions": rows(lex)}
    failed = sum(a["failed"] for a in res.values())
    n_items = sum(len(a["diff"]) for a in res.values()) + failed
    for label, table in tables.items():
        print(label)
        print(" | ".join(HEAD))
        for r in table:
            print(" | ".join(r))
    print(f"LLM judge: {failed} of {n_items} answers failed; {secs / max(n_items, 1):.1f} s per answer")
    if args.out:
        replace_block(Path(args.out), llm_markdown(tables, failed, n_items, args.llm_model, secs), LLM_START, LLM_END)


def load_lexical(path: str | None):
    if not path:
        return LexicalJudge(CriticConfig())
    spec = importlib.util.spec_from_file_location("lexical_under_test", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"--lexical {path}: not a Python file")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.LexicalJudge(CriticConfig())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="markdown file whose 'Citation judges' section is written or replaced")
    ap.add_argument("--lexical-from", help="measure the LexicalJudge of this file instead")
    ap.add_argument("--before", action="append", default=[],
                    help="also measure the LexicalJudge of this file (an older version) for the docs; repeatable")
    ap.add_argument("--before-label", action="append", default=[],
                    help="what each --before file is, for the docs (one per --before, in order)")
    ap.add_argument("--llm-url", help="OpenAI-compatible base URL of an LLM judge to measure instead (…/v1)")
    ap.add_argument("--llm-model", help="the LLM judge's model name (as served)")
    ap.add_argument("--llm-limit", type=int, default=4, help="LLM judge: questions per dataset (default 4)")
    args = ap.parse_args()
    if len(args.before_label) not in (0, len(args.before)):
        ap.error(f"{len(args.before_label)} --before-label for {len(args.before)} --before")
    if bool(args.llm_url) != bool(args.llm_model):
        ap.error("--llm-url and --llm-model go together")
    labels = args.before_label or [f"The lexical judge of {f}" for f in args.before]
    with tempfile.TemporaryDirectory() as tmp:
        corpus = shipped_closed_corpus(Path(tmp) / "corpus.jsonl")
        build_index(corpus, "bm25", Path(tmp) / "bm25", show_progress=False)
        retriever = load_index(Path(tmp) / "bm25")
        if args.llm_url:
            run_llm(args, retriever)
            return 0
        res, secs = measure(load_lexical(args.lexical_from), retriever)
        before = [(label, rows(measure(load_lexical(f), retriever)[0])) for label, f in
                  zip(labels, args.before, strict=True)]
    table = rows(res)
    n_items = sum(len(a["diff"]) for a in res.values())
    print(" | ".join(HEAD))
    for r in table:
        print(" | ".join(r))
    for label, old in before:
        print(f"{label}:")
        for r in old:
            print(" | ".join(r))
    if args.out:
        path = Path(args.out)
        text = path.read_text() if path.exists() else "# Benchmarks\n"
        block = markdown(table, before, secs, n_items, "python " + " ".join(
            [Path(sys.argv[0]).as_posix(), *(shlex.quote(a) for a in sys.argv[1:])]))
        if START in text:
            text = text[: text.index(START)] + block + text[text.index(END) + len(END) + 1:]
        else:
            text = text.rstrip("\n") + "\n\n" + block
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
