#!/usr/bin/env python3
"""Writes the conformance table of docs/onnx.md from `dtensor onnx-conformance --json`.

    build/dtensor onnx-conformance --json > conformance.json
    python3 scripts/onnx_conformance_table.py conformance.json > table.md

Standard library only. One row per claimed ONNX op (passed / failed / unsupported node tests), then
the refusal reasons grouped by op, shortened to their first clause.
"""
import json
import re
import sys


def main():
    with open(sys.argv[1]) as f:
        j = json.load(f)
    t = j["totals"]
    print(f"{len(j['claimed_ops'])} claimed ops; {t['passed']} node tests passed, {t['failed']} failed, "
          f"{t['unsupported']} refused as unsupported ({t['not_claimed']} tests use ops not claimed).")
    print()
    print("| ONNX op | passed | failed | unsupported |")
    print("|---|---|---|---|")
    for op, c in sorted(j["ops"].items()):
        print(f"| {op} | {c['passed']} | {c['failed']} | {c['unsupported']} |")
    reasons = {}
    for test in j["tests"]:
        if test["status"] != "passed":
            # The importer's message after the node name: "node 'n' (Op, output 'y'): WHY".
            why = test.get("reason", "").split("): ", 1)[-1]
            # "/usr/share/.../input_0.pb has ONNX element type UINT8, which ..." -> one reason per type.
            why = re.sub(r"^/\S+ has ", "an input has ", why)
            why = re.sub(r", which dtensor does not support \(.*\)$", ", not supported", why)
            reasons.setdefault(test["op"], {}).setdefault(why, []).append(test["name"])
    if reasons:
        print()
        print("Tests not passed, by op and reason:")
        print()
        for op in sorted(reasons):
            for why, names in sorted(reasons[op].items()):
                print(f"- **{op}** ({len(names)}): {why} — {', '.join(n.removeprefix('test_') for n in names)}")


if __name__ == "__main__":
    main()
