"""Generate the Python gRPC code (and mypy stubs) for proto/ into ./kcontroller.

The generated package is never edited by hand and is not committed: ./dev, the
Dockerfile and CI all run this before installing the project.
"""

from __future__ import annotations

import pathlib
import shutil
import sys

from grpc_tools import protoc


def main() -> int:
    root = pathlib.Path(__file__).resolve().parent.parent
    proto_root = root / "proto"
    out = root
    package_dir = root / "kcontroller"
    if package_dir.exists():
        shutil.rmtree(package_dir)
    protos = sorted(str(p.relative_to(proto_root)) for p in proto_root.rglob("*.proto"))
    include = pathlib.Path(protoc.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{proto_root}",
        f"-I{include}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
    ]
    if shutil.which("protoc-gen-mypy") or (pathlib.Path(sys.executable).parent / "protoc-gen-mypy").exists():
        bindir = pathlib.Path(sys.executable).parent
        args += [
            f"--plugin=protoc-gen-mypy={bindir / 'protoc-gen-mypy'}",
            f"--plugin=protoc-gen-mypy_grpc={bindir / 'protoc-gen-mypy_grpc'}",
            f"--mypy_out={out}",
            f"--mypy_grpc_out={out}",
        ]
    rc = protoc.main([*args, *protos])
    if rc != 0:
        print(f"protoc failed with exit code {rc}", file=sys.stderr)
        return rc
    for directory in [package_dir, *[d for d in package_dir.rglob("*") if d.is_dir()]]:
        (directory / "__init__.py").touch()
        (directory / "py.typed").touch()
    print(f"generated {len(protos)} proto files into {package_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
