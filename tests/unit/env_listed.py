#!/usr/bin/env python3
"""Every environment variable sinew's code reads is declared as an EnvParam
and listed by `sinew env`.

Reads the sources (src/, include/, tools/, bench/, examples/), collects the
names declared as EnvParam and every getenv/getenv_opt call, and compares
them with the names `sinew env` prints. Fails, naming file and line, on a
read of a literal name that no EnvParam declares, on a read whose name is
not an EnvParam's, and on a declared name `sinew env` does not list.

usage: env_listed.py SINEW_BINARY SOURCE_DIR
"""
import pathlib
import re
import subprocess
import sys

DIRS = ("src", "include", "tools", "bench", "examples")
# A declaration names its variable with a literal or with a constant of the
# launch protocol (launch_protocol.h: `inline constexpr const char* kRank = "RANK"`).
DECL = re.compile(r'EnvParam<[^;{}]*?>\s+\w+\s*\{\s*(?:"([A-Za-z_][A-Za-z0-9_]*)"|(k\w+)\s*,)', re.S)
CONST = re.compile(r'constexpr\s+const\s+char\s*\*\s*(k\w+)\s*=\s*"([A-Za-z_][A-Za-z0-9_]*)"')
READ = re.compile(r'\bgetenv(?:_opt)?\s*\(\s*((?:[^()]|\(\))*)\)')
# The one place that calls getenv for every EnvParam.
READERS = {"src/core/env.cc", "include/sinew/core/env.h"}
# Reads through a declared parameter's own name.
VIA_PARAM = re.compile(r'^[\w:.()\->]*name(\(\)|\.c_str\(\))$')


def constants(root):
    names = {}
    for d in DIRS:
        for path in (root / d).rglob("*.h"):
            names.update(CONST.findall(path.read_text(errors="replace")))
    return names


def scan(root):
    declared, problems = {}, []
    names = constants(root)
    for d in DIRS:
        for path in sorted((root / d).rglob("*")):
            if path.suffix not in (".cc", ".h"):
                continue
            rel = path.relative_to(root).as_posix()
            # Comments are blanked (an example in one is no declaration).
            text = re.sub(r"//[^\n]*", "", path.read_text(errors="replace"))
            for m in DECL.finditer(text):
                where = f"{rel}:{text.count(chr(10), 0, m.start()) + 1}"
                name = m.group(1) or names.get(m.group(2))
                if name is None:
                    problems.append(f"{where}: EnvParam named by {m.group(2)}, which no constant defines")
                else:
                    declared.setdefault(name, where)
            if rel in READERS:
                continue
            for m in READ.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                arg = m.group(1).strip()
                lit = re.fullmatch(r'"([^"]*)"', arg)
                if lit:
                    problems.append(f"{rel}:{line}: reads {lit.group(1)} with getenv instead of an EnvParam")
                elif not VIA_PARAM.match(arg):
                    problems.append(f"{rel}:{line}: reads a variable named by '{arg}', not by an EnvParam")
    return declared, problems


def listed(binary):
    out = subprocess.run([binary, "env"], check=True, capture_output=True, text=True,
                         timeout=60).stdout
    names = set()
    for line in out.splitlines():
        m = re.match(r'^([A-Za-z_][A-Za-z0-9_]*)\s+(int|float|bool|string)\s+default', line)
        if m:
            names.add(m.group(1))
    return names


def main():
    binary, root = sys.argv[1], pathlib.Path(sys.argv[2])
    declared, problems = scan(root)
    shown = listed(binary)
    for name, where in sorted(declared.items()):
        if name not in shown:
            problems.append(f"{where}: {name} is declared but `sinew env` does not list it")
    for name in sorted(shown - declared.keys()):
        problems.append(f"`sinew env` lists {name}, which no source declares")
    for p in problems:
        print(p)
    print(f"{len(declared)} variables declared, {len(shown)} listed by `sinew env`, "
          f"{len(problems)} problems")
    return 1 if problems or not declared else 0


if __name__ == "__main__":
    sys.exit(main())
