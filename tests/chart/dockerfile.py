"""Enough of a Dockerfile reader to lint and rehearse our two images without a Docker engine.

``parse`` splits a Dockerfile into stages of instructions. ``rehearse`` runs a stage's WORKDIR,
ENV, COPY and RUN in a sandbox directory: absolute paths under /build and /opt are moved into
the sandbox, ``python`` is the host's CPython of the image's minor version, and the build
context is the repository. So the commands the image runs are the commands tested.
``dockerignore_includes`` applies a .dockerignore the way Docker does (the last matching
pattern wins; a pattern matching a parent directory matches its files).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

SANDBOXED_ROOTS = ("/build", "/opt")


@dataclass
class Instruction:
    keyword: str
    args: str

    def flags_and_words(self) -> tuple[dict[str, str], list[str]]:
        words = shlex.split(self.args)
        flags = {}
        while words and words[0].startswith("--"):
            key, _, value = words.pop(0)[2:].partition("=")
            flags[key] = value
        return flags, words


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def parse(path: Path) -> list[Stage]:
    lines: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):  # a comment inside a continued instruction
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    stages: list[Stage] = []
    for line in lines:
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = args.split()
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(words[0], name))
        elif stages:
            stages[-1].instructions.append(Instruction(keyword, args.strip()))
    return stages


def exec_form(args: str) -> list[str]:
    """A JSON-array (exec form) CMD/ENTRYPOINT/HEALTHCHECK CMD."""
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value)
    return value


def env_pairs(args: str) -> dict[str, str]:
    return dict(word.split("=", 1) for word in shlex.split(args))


class Sandbox:
    def __init__(self, root: Path, context: Path) -> None:
        self.root = root
        self.context = context
        self.bin = root / ".shims"
        self.bin.mkdir(parents=True, exist_ok=True)
        python = Path(getattr(sys, "_base_executable", sys.executable))
        (self.bin / "python").symlink_to(python)
        (self.bin / "python3").symlink_to(python)
        self.cwd = root
        self.env: dict[str, str] = {}

    def path(self, text: str) -> str:
        """Absolute paths under the sandboxed roots, moved into the sandbox."""
        for prefix in SANDBOXED_ROOTS:
            text = re.sub(rf"(?<![\w./-]){re.escape(prefix)}(?=/|\b)", f"{self.root}{prefix}", text)
        return text

    def environ(self) -> dict[str, str]:
        env = {
            "PATH": f"{self.bin}{os.pathsep}/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.root),
            "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip")),
        }
        for key, value in self.env.items():
            env[key] = self.path(value.replace("$PATH", env["PATH"]))
        return env

    def rehearse(self, stage: Stage) -> None:
        for ins in stage.instructions:
            if ins.keyword == "ENV":
                self.env.update(env_pairs(ins.args))
            elif ins.keyword == "WORKDIR":
                self.cwd = Path(self.path(ins.args))
                self.cwd.mkdir(parents=True, exist_ok=True)
            elif ins.keyword == "COPY":
                flags, words = ins.flags_and_words()
                assert "from" not in flags, "a build stage copies from the context only"
                *sources, dest = words
                target = Path(self.path(dest)) if dest.startswith("/") else self.cwd / dest
                into_dir = dest.endswith("/") or len(sources) > 1
                for source in sources:
                    src = self.context / source
                    out = target / src.name if into_dir else target
                    out.parent.mkdir(parents=True, exist_ok=True)
                    if src.is_dir():
                        shutil.copytree(
                            src,
                            out,
                            dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
                        )
                    else:
                        shutil.copy2(src, out)
            elif ins.keyword == "RUN":
                command = self.path(ins.args)
                proc = subprocess.run(
                    ["sh", "-c", command],
                    cwd=self.cwd,
                    env=self.environ(),
                    capture_output=True,
                    text=True,
                    timeout=600,
                )
                assert proc.returncode == 0, f"RUN {ins.args}\n{proc.stdout}\n{proc.stderr}"
            elif ins.keyword in ("ARG", "LABEL"):
                continue
            else:
                raise AssertionError(f"no rehearsal for {ins.keyword} in a build stage")


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out + r"\Z")


def dockerignore_includes(ignore_file: Path, relative: str) -> bool:
    """Whether the file at ``relative`` (to the context) is sent with the build context."""
    rules: list[tuple[bool, re.Pattern[str]]] = []
    for raw in ignore_file.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line[1:] if negate else line
        rules.append((negate, _pattern_regex(pattern.strip("/"))))
    parts = relative.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    included = True
    for negate, regex in rules:
        if any(regex.match(p) for p in prefixes):
            included = negate
    return included
