"""Writes the demo's embedded default data set: GSM8K-style arithmetic word problems.

Deterministic (seeded), so every demo run prepares the same rows; no download needed.

    python examples/make_demo_data.py OUT.jsonl [--rows 4000]
"""

import argparse
import json
import random

NAMES = ["Ava", "Ben", "Chen", "Dana", "Eli", "Fatima", "Gus", "Hana", "Ivan", "Jade"]
ITEMS = ["apples", "stickers", "marbles", "books", "cookies", "pencils", "shells", "coins"]


def problem(rng: random.Random) -> dict[str, str]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b, c = rng.randint(2, 90), rng.randint(2, 40), rng.randint(2, 9)
    question = (f"{name} has {a} {item}. {name} buys {b} more {item}, then shares them equally "
                f"among {c} friends, keeping the remainder. How many {item} does {name} keep?")
    total = a + b
    answer = (f"{name} has {a} + {b} = <<{a}+{b}={total}>>{total} {item}.\n"
              f"Each friend gets {total} // {c} = <<{total}//{c}={total // c}>>{total // c}, "
              f"so {name} keeps {total} - {c} * {total // c} = <<{total}-{c}*{total // c}={total % c}>>{total % c}.\n"
              f"#### {total % c}")
    return {"question": question, "answer": answer}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with open(args.out, "w") as f:
        for _ in range(args.rows):
            f.write(json.dumps(problem(rng)) + "\n")


if __name__ == "__main__":
    main()
