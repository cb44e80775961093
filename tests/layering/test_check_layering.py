#!/usr/bin/env python3
"""scripts/check-layering on small trees: a clean one passes; an include up the pipeline and a
long file each fail it, naming the file, the line and both stages."""

import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                      "check-layering")


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def run(root, *extra):
    return subprocess.run([sys.executable, SCRIPT, "--root", root, *extra],
                          capture_output=True, text=True)


class CheckLayeringTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        write(self.root, "compiler/spec/Spec.h", "#pragma once\n")
        write(self.root, "compiler/plan/Plan.h", '#pragma once\n#include "compiler/spec/Spec.h"\n')
        write(self.root, "templates/abi/fwd_params.h", "#pragma once\n")
        write(self.root, "templates/sm80/fwd_kernel.cuh", '#include "abi/fwd_params.h"\n')
        write(self.root, "runtime/include/fagen/fagen.h", "#pragma once\n")
        write(self.root, "cli/Main.cpp", '#include "compiler/plan/Plan.h"\n#include "fagen/fagen.h"\n'
              '#include "llvm/Support/Error.h"\n')

    def tearDown(self):
        self.tmp.cleanup()

    def test_clean_tree_passes_and_draws(self):
        svg = os.path.join(self.root, "graph.svg")
        r = run(self.root, "--svg", svg)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(svg) as f:
            text = f.read()
        self.assertIn("<svg", text)
        self.assertIn("compiler/plan/", text)

    def test_upward_include_fails(self):
        write(self.root, "compiler/spec/Spec.cpp",
              '#include "compiler/spec/Spec.h"\n#include "compiler/plan/Plan.h"\n')
        r = run(self.root)
        self.assertEqual(r.returncode, 1)
        self.assertIn("compiler/spec/Spec.cpp:2: compiler/spec (rank 1) includes", r.stderr)
        self.assertIn("of compiler/plan (rank 2), a later stage", r.stderr)

    def test_template_include_up_fails(self):
        # abi/ is shared with the runtime: it must not reach into an arch template.
        write(self.root, "templates/abi/bwd_params.h", '#include "sm80/fwd_kernel.cuh"\n')
        r = run(self.root)
        self.assertEqual(r.returncode, 1)
        self.assertIn("templates/abi/bwd_params.h:1: templates/abi", r.stderr)
        self.assertIn("of templates/sm80", r.stderr)

    def test_runtime_public_header_counts_as_runtime(self):
        write(self.root, "compiler/build/Build.cpp", '#include "fagen/fagen.h"\n')
        r = run(self.root)
        self.assertEqual(r.returncode, 1)
        self.assertIn("compiler/build/Build.cpp:1: compiler/build (rank 4)", r.stderr)
        self.assertIn("of runtime (rank 6)", r.stderr)

    def test_runtime_reaches_only_its_own_layers(self):
        # The bundle format is the runtime's; the rest of compiler/ and LLVM are not.
        write(self.root, "compiler/bundle/Bundle.h", "#pragma once\n")
        write(self.root, "runtime/src/Load.cpp", '#include "compiler/bundle/Bundle.h"\n')
        self.assertEqual(run(self.root).returncode, 0, run(self.root).stderr)
        write(self.root, "compiler/bundle/Bundle.cpp", '#include "compiler/spec/Spec.h"\n')
        write(self.root, "runtime/src/Select.cpp", '#include "llvm/Support/Error.h"\n')
        r = run(self.root)
        self.assertEqual(r.returncode, 1)
        self.assertIn("compiler/bundle/Bundle.cpp:1: the runtime builds without LLVM", r.stderr)
        self.assertIn("runtime/src/Select.cpp:1: the runtime builds without LLVM", r.stderr)

    def test_older_arch_template_does_not_include_newer(self):
        write(self.root, "templates/sm90/tile_ops.cuh", '#include "sm80/fwd_kernel.cuh"\n')
        self.assertEqual(run(self.root).returncode, 0)
        write(self.root, "templates/sm80/mma.cuh", '#include "sm90/tile_ops.cuh"\n')
        r = run(self.root)
        self.assertEqual(r.returncode, 1)
        self.assertIn("templates/sm80/mma.cuh:1: templates/sm80", r.stderr)

    def test_long_file_fails_outside_tests_only(self):
        write(self.root, "tests/unit/LongTest.cpp", "//\n" * 900)
        self.assertEqual(run(self.root).returncode, 0)
        write(self.root, "tuner/Tuner.cpp", "//\n" * 801)
        r = run(self.root)
        self.assertEqual(r.returncode, 1)
        self.assertIn("tuner/Tuner.cpp: 801 lines, more than 800", r.stderr)


if __name__ == "__main__":
    unittest.main()
