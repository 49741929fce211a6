"""Issue 43's contradiction set for the offline judge: answers that their passages state (must be grounded) and
answers their passages contradict or do not state (must not be), on constructed passages and on real shipped
ones (the shipped dev samples' contexts: Christian Ackermann, Jerome Storm, Henry Edwards, Iain Pears and
Richard Llewellyn, Raymond Carver, The Ninth Gate, Mountrail County's courthouse, Pothos, Eve Beglarian).

Each case is (id, question, answer, passages as (title, text) or ("shipped", title), whether the judge must
ground it). tests/test_critic_claims.py holds the lexical judge to every case; run as a script it counts the
cases a judge gets wrong, for this checkout or an older judge file (`git show main:awarl/critic/lexical_judge.py
> F`; docs/research.md quotes both):

    python tests/critic_contradictions.py [--judge-file F]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from functools import lru_cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ANN = ("Ann Ray", "Ann Ray is a tennis player. Ann Ray was born on 3 May 1985 in Leeds.")
BO = ("Bo Tell", "Bo Tell is a tennis player. Bo Tell was born on 9 July 1990 in Oslo.")
ACME = ("Acme Survey 2023", "The 2023 industry survey puts the Acme market size at $5B.")
CY = ("Cy Vance", "Cy Vance is a painter. Cy Vance worked in Leeds for a decade. Cy Vance was born in Oslo.")
ZED = ("Zed Tower", "Mia Holt did not design the Zed Tower. The Zed Tower was designed by Rex Dunn.")
LIN = ("Lin Orr", "Reports that Lin Orr was born in Leeds are false. Lin Orr's birthplace is Oslo.")
PARK = ("Foo Trail park", "The park says the Foo Trail is 5 km long.")
VEL = ("Vel Corp", "Vel Corp was founded on March 3, 1999 in Springfield.")

GROUND, REFUSE = True, False
CASES: list[tuple[str, str, str, list[tuple[str, str]], bool]] = [
    # constructed: entities, values at their precision and in their units, negation, relation
    ("born-where", "Where was Ann Ray born?", "Leeds", [ANN], GROUND),
    ("born-where-other-city", "Where was Ann Ray born?", "Oslo", [ANN, BO], REFUSE),
    ("long-claim", "Where was Ann Ray born?", "Ann Ray was born on 3 May 1985 in Leeds.", [ANN], GROUND),
    ("long-claim-other-city", "Where was Ann Ray born?", "Ann Ray was born on 3 May 1985 in Oslo.", [ANN], REFUSE),
    ("date-coarser", "When was Ann Ray born?", "May 1985", [ANN], GROUND),
    ("date-other-year", "When was Ann Ray born?", "1986", [ANN], REFUSE),
    ("date-other-day", "When was Ann Ray born?", "4 May 1985", [ANN], REFUSE),
    ("amount-long", "How big is the Acme market?", "The 2023 industry survey puts the Acme market size at $5B.",
     [ACME], GROUND),
    ("amount-in-millions", "How big is the Acme market?", "The 2023 industry survey puts the Acme market size at "
     "$5,000 million.", [ACME], GROUND),
    ("amount-other", "How big is the Acme market?", "The 2023 industry survey puts the Acme market size at $7B.",
     [ACME], REFUSE),
    ("length-in-metres", "How long is the Foo Trail according to the park?", "5,000 m", [PARK], GROUND),
    ("length-in-miles", "How long is the Foo Trail according to the park?", "5 miles", [PARK], REFUSE),
    ("worked-not-born", "Where was Cy Vance born?", "Leeds", [CY], REFUSE),
    ("born", "Where was Cy Vance born?", "Oslo", [CY], GROUND),
    ("negated-designer", "Who designed the Zed Tower?", "Mia Holt", [ZED], REFUSE),
    ("designer", "Who designed the Zed Tower?", "Rex Dunn", [ZED], GROUND),
    ("negated-long", "Who designed the Zed Tower?", "Mia Holt designed the Zed Tower.", [ZED], REFUSE),
    ("paraphrased-birthplace", "Where was Lin Orr born?", "Lin Orr was born in Oslo.", [LIN], GROUND),
    ("denied-report", "Where was Lin Orr born?", "Lin Orr was born in Leeds.", [LIN], REFUSE),
    ("date-with-comma", "When was Vel Corp founded?", "Vel Corp was founded on March 3, 1999 in Springfield.", [VEL],
     GROUND),
    ("comparison", "Who was born earlier, Ann Ray or Bo Tell?", "Ann Ray", [ANN, BO], GROUND),
    ("comparison-wrong-entity", "Who was born earlier, Ann Ray or Bo Tell?", "Bo Tell", [ANN, BO], REFUSE),
    ("choice-neither-option", "Who was born earlier, Ann Ray or Bo Tell?", "Leeds", [ANN, BO], REFUSE),
    # real shipped passages
    ("ackermann-born", "Where was Christian Ackermann born?", "Königsberg", [("shipped", "Christian Ackermann")],
     GROUND),
    ("ackermann-worked-not-born", "Where was Christian Ackermann born?", "Riga", [("shipped", "Christian Ackermann")],
     REFUSE),
    ("ackermann-active-not-born", "Where was Christian Ackermann born?", "Tallinn",
     [("shipped", "Christian Ackermann")], REFUSE),
    ("storm-died", "Where did Jerome Storm die?", "Desert Hot Springs", [("shipped", "Jerome Storm")], GROUND),
    ("storm-born-not-died", "Where did Jerome Storm die?", "Denver", [("shipped", "Jerome Storm")], REFUSE),
    ("storm-birth-date", "When was Jerome Storm born?", "Jerome Storm was born on November 11, 1890.",
     [("shipped", "Jerome Storm")], GROUND),
    ("storm-death-date-for-birth", "When was Jerome Storm born?", "July 10, 1958", [("shipped", "Jerome Storm")],
     REFUSE),
    ("edwards-died", "Where did Henry Edwards die?", "Chobham", [("shipped", "Henry Edwards (actor)")], GROUND),
    ("edwards-born-not-died", "Where did Henry Edwards die?", "Weston-super-Mare",
     [("shipped", "Henry Edwards (actor)")], REFUSE),
    ("edwards-birth-for-death", "When did Henry Edwards die?", "18 September 1882",
     [("shipped", "Henry Edwards (actor)")], REFUSE),
    ("born-first", "Who was born first Iain Pears or Richard Llewellyn ?", "Richard Llewellyn",
     [("shipped", "Iain Pears"), ("shipped", "Richard Llewellyn")], GROUND),
    ("born-first-wrong", "Who was born first Iain Pears or Richard Llewellyn ?", "Iain Pears",
     [("shipped", "Iain Pears"), ("shipped", "Richard Llewellyn")], REFUSE),
    ("carver-born", "What is the name of the city Raymond Carver was born in?", "Clatskanie",
     [("shipped", "Raymond Carver")], GROUND),
    ("carver-grew-up-not-born", "What is the name of the city Raymond Carver was born in?", "Yakima",
     [("shipped", "Raymond Carver")], REFUSE),
    ("ninth-gate-release", "When did The Ninth Gate come out?", "1999", [("shipped", "The Ninth Gate")], GROUND),
    ("ninth-gate-novel-year", "When did The Ninth Gate come out?", "1993", [("shipped", "The Ninth Gate")], REFUSE),
    ("courthouse-is-not-seat", "capital of Mountrail County?", "Stanley", [("shipped", "Mountrail County Courthouse")],
     REFUSE),
    ("both-genera", "Are Pothos and Tibouchina Aubl both flowering genus of plants?", "yes",
     [("shipped", "Pothos (genus)"), ("shipped", "Tibouchina")], GROUND),
    ("descent-not-stated", "Are Eve Beglarian and Zach Bogosian both of Armenian descent?", "yes",
     [("shipped", "Eve Beglarian"), ("shipped", "Zach Bogosian")], REFUSE),
]


@lru_cache(maxsize=1)
def _shipped() -> dict[str, str]:
    from awarl.data.loaders import load_shipped

    out: dict[str, str] = {}
    for ds in ("hotpotqa", "2wikimultihopqa", "musique"):
        for ex in load_shipped(ds):
            for p in ex.context:
                out.setdefault(p.title, p.text)
    return out


def passages(spec: list[tuple[str, str]]) -> list:
    from awarl.critic.schema import PassageRef

    refs = []
    for i, (title, text) in enumerate(spec):
        if title == "shipped":
            title, text = text, _shipped()[text]
        refs.append(PassageRef(number=i + 1, id=f"p{i + 1}", title=title, text=text))
    return refs


def grounded(judge, question: str, answer: str, spec: list[tuple[str, str]]) -> bool:  # noqa: ANN001
    from awarl.rewards.citation import build_critic_input

    refs = passages(spec)
    v = judge.verify_one(build_critic_input(question, answer, [p.number for p in refs], refs))
    return bool(v.verified_claims) and all(c.status == "grounded" for c in v.verified_claims)


def wrong(judge) -> list[str]:  # noqa: ANN001
    """The cases the judge gets wrong: an answer to refuse that it grounds, or one to ground that it does not."""
    return [cid for cid, q, a, spec, want in CASES if grounded(judge, q, a, spec) != want]


def main() -> int:
    from awarl.config import CriticConfig
    from awarl.critic.lexical_judge import LexicalJudge

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--judge-file", help="a lexical_judge.py to measure instead (an older version)")
    args = ap.parse_args()
    judge = LexicalJudge(CriticConfig())
    if args.judge_file:
        spec = importlib.util.spec_from_file_location("lexical_under_test", args.judge_file)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        judge = mod.LexicalJudge(CriticConfig())
    bad = wrong(judge)
    refuse = sum(not want for *_, want in CASES)
    print(f"{len(CASES)} cases ({refuse} to refuse, {len(CASES) - refuse} to ground): {len(bad)} wrong")
    print(f"  refused answers grounded: {sum(1 for c in CASES if c[0] in bad and not c[4])}/{refuse}")
    print(f"  stated answers not grounded: {sum(1 for c in CASES if c[0] in bad and c[4])}/{len(CASES) - refuse}")
    for cid in bad:
        print(f"  wrong: {cid}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
