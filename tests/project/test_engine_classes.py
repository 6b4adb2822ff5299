"""The engine's classes stay small (docs/architecture.md, "Engine internals").

Counts the data members of every class and struct defined in the headers of
csrc/engine/ (nested ones on their own) and fails when one has more than
MAX_MEMBERS: a class that outgrows it has more than one job, and gets split
by responsibility as Communicator was. It reads sources only: no build, no
import of pytfcomm.

Also a script (``python tests/project/test_engine_classes.py [--all]``): prints the count of
every class, largest first, and exits 1 when one is over the limit.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEADERS = sorted((ROOT / "csrc" / "engine").glob("*.h"))
MAX_MEMBERS = 25
# Classes the split made: the count must see them (a parser that finds
# nothing would pass every header).
EXPECTED = ("Communicator", "EngineConfig", "RequestQueue", "Driver", "CollectiveExecutor")

CLASS_HEAD = re.compile(r"\b(class|struct|union)\s+(\w+)\s*(?:final\s*)?(?::[^;{]*)?$")
ACCESS = re.compile(r"\b(public|private|protected)\s*:(?!:)")
SKIP_WORDS = ("using", "friend", "typedef", "static", "enum", "template", "static_assert")


def strip_source(text: str) -> str:
    """The source without comments, string and character literals, and
    preprocessor lines."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)
    text = re.sub(r"'(?:\\.|[^'\\\n])*'", "''", text)
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def matching_brace(text: str, at: int) -> int:
    """The index of the brace closing the one at `at`."""
    depth = 0
    for i in range(at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    raise ValueError("unbalanced braces")


def top_level(stmt: str, chars: str) -> bool:
    """Whether any of `chars` occurs in `stmt` outside (), <>, [] and {}."""
    depth = 0
    i = 0
    while i < len(stmt):
        c = stmt[i]
        if stmt.startswith("->", i):
            i += 2
            continue
        if c in "(<[{":
            if depth == 0 and c in chars:
                return True
            depth += 1
        elif c in ")>]}":
            depth = max(0, depth - 1)
        elif depth == 0 and c in chars:
            return True
        i += 1
    return False


def declarators(stmt: str) -> int:
    """How many members one declaration statement declares (a, b, c: three)."""
    head = stmt
    depth = 0
    for i, c in enumerate(stmt):  # what comes before a default value
        if c in "(<[{":
            depth += 1
        elif c in ")>]}":
            depth = max(0, depth - 1)
        elif c == "=" and depth == 0:
            head = stmt[:i]
            break
    count, depth = 1, 0
    for c in head:
        if c in "(<[{":
            depth += 1
        elif c in ")>]}":
            depth = max(0, depth - 1)
        elif c == "," and depth == 0:
            count += 1
    return count


def tidy(stmt: str) -> str:
    """`stmt` without access labels, and with operators named `operator` and
    comparisons blanked (neither is a default value's `=`)."""
    stmt = ACCESS.sub(" ", stmt)
    stmt = re.sub(r"\boperator\s*[^\s(]*", "operator", stmt)
    return re.sub(r"[=!<>]=", "  ", stmt).strip()


def is_data_member(stmt: str) -> bool:
    stmt = tidy(stmt)
    if not stmt or stmt.split()[0] in SKIP_WORDS:
        return False
    head = stmt.split("=", 1)[0] if top_level(stmt, "=") else stmt
    return not top_level(head, "(") and "operator" not in head.split()


def count_members(text: str) -> dict[str, int]:
    """{class name: data members} of every class or struct defined in `text`
    (already stripped), nested ones as Outer::Inner."""
    found: dict[str, int] = {}

    def scan(body: str, outer: str | None) -> int:
        members, stmt, i = 0, "", 0
        while i < len(body):
            c = body[i]
            if c == ";":
                if is_data_member(stmt):
                    members += declarators(tidy(stmt))
                stmt = ""
            elif c == "{":
                end = matching_brace(body, i)
                head = tidy(stmt)
                m = CLASS_HEAD.search(head)
                first = head.split()[:1]
                if first in (["namespace"], ["extern"]):
                    members += scan(body[i + 1 : end], outer)
                    stmt = ""
                elif m and first != ["enum"] and not top_level(head, "="):
                    name = f"{outer}::{m.group(2)}" if outer else m.group(2)
                    found[name] = scan(body[i + 1 : end], name)
                    stmt = ""  # what follows (`struct S {...} s;`) is a member
                elif first == ["enum"] or (top_level(head, "(") and not top_level(head, "=")):
                    stmt = ""  # an enum's or a function's body ends the statement
                else:
                    stmt += "{}"  # a brace initializer
                i = end + 1
                continue
            else:
                stmt += c
            i += 1
        return members

    scan(text, None)
    return found


def engine_counts() -> dict[str, int]:
    """{'header.h: Class': data members} of every class in csrc/engine/*.h."""
    counts = {}
    for h in HEADERS:
        for name, n in count_members(strip_source(h.read_text())).items():
            counts[f"{h.name}: {name}"] = n
    return counts


def test_no_engine_class_has_more_than_the_limit() -> None:
    counts = engine_counts()
    names = {k.split(": ", 1)[1] for k in counts}
    missing = [c for c in EXPECTED if c not in names]
    assert not missing, f"the count found no class {missing} in csrc/engine/*.h"
    over = {k: n for k, n in counts.items() if n > MAX_MEMBERS}
    assert not over, (
        f"classes with more than {MAX_MEMBERS} data members (split them by responsibility; "
        f"docs/architecture.md, 'Engine internals'): {over}"
    )


def test_the_count_sees_what_it_must() -> None:
    """Members with initializers, several declarators, templates with commas
    and function types count; methods, constructors, operators, nested types,
    enums, statics, usings and friends do not; nested classes count apart."""
    sample = strip_source(
        """
        namespace x {
        class Fwd;
        class A : public B {
         public:
          explicit A(int n) : n_(n) {}  // a constructor
          A(const A&) = delete;
          int get() const { return n_; }
          Thing* operator->() const { return p_.load(); }
          bool operator==(const A& o) const { return n_ == o.n_; }
          template <typename F> void each(F f);
          static constexpr int kMax = 3;
          using Map = std::map<int, int>;
          friend class C;
          enum class State { kOne, kTwo };
          struct Inner {
            int a = 0;
            std::string b{"x;y"};
          };

         private:
          int n_;  // one
          std::atomic<bool> flag_{false};
          std::unordered_map<int, std::unique_ptr<int>> owned_;
          std::function<void*(uint64_t)> alloc_ = nullptr;
          algorithms::Group world, local, cross;
          double x_ = f(1, 2);
          mutable std::mutex mu_;
        };
        inline bool operator==(const A& a, const A& b) { return a.get() == b.get(); }
        struct P { int a; int b; };
        }
        """
    )
    assert count_members(sample) == {"A": 9, "A::Inner": 2, "P": 2}
    assert count_members(
        strip_source(f"class Big {{ {' '.join(f'int m{i};' for i in range(26))} }};")
    ) == {"Big": 26}


def main(argv: list[str]) -> int:
    """Print one summary line (every class with ``--all``); 1 if a class is over the limit."""
    counts = engine_counts()
    if "--all" in argv:
        for name, n in sorted(counts.items(), key=lambda kv: -kv[1]):
            print(f"{n:4d}  {name}")
    over = [k for k, n in counts.items() if n > MAX_MEMBERS]
    if over:
        print(f"engine classes over {MAX_MEMBERS} data members: {', '.join(over)}")
        return 1
    top = max(counts.items(), key=lambda kv: kv[1])
    print(f"engine classes: {len(counts)}, the largest {top[0]} with {top[1]} data members")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
