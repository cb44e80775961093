#!/usr/bin/env python3
"""python/fagen/runtime.py (the ctypes binding) agrees with runtime/include/fagen/fagen.h: every enum
value and constant the binding spells, and the field order of the structs it mirrors. No GPU,
no torch, no build needed: both files are read as text (the binding is imported, which loads
nothing until a bundle is opened)."""

import importlib.util
import os
import re
import sys
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
HEADER = os.path.join(ROOT, "runtime", "include", "fagen", "fagen.h")
BINDING = os.path.join(ROOT, "python", "fagen", "runtime.py")


def strip_comments(text):
    return re.sub(r"/\*.*?\*/|//[^\n]*", "", text, flags=re.S)


def header():
    with open(HEADER) as f:
        return strip_comments(f.read())


def c_enums(text):
    """{enum name: {enumerator: value}} of every `typedef enum NAME { ... }`."""
    out = {}
    for name, body in re.findall(r"typedef\s+enum\s+(\w+)\s*\{(.*?)\}", text, re.S):
        values = {}
        for item in body.split(","):
            m = re.match(r"\s*(\w+)\s*=\s*(\d+)", item)
            if m:
                values[m.group(1)] = int(m.group(2))
        out[name] = values
    return out


def c_defines(text):
    return {k: int(v) for k, v in re.findall(r"#define\s+(FAGEN_\w+)\s+(\d+)u?\b", text)}


def c_struct_fields(text, name):
    """Field names of `typedef struct NAME { ... }` in order (arrays and lists expanded)."""
    body = re.search(r"typedef\s+struct\s+%s\s*\{(.*?)\}\s*%s;" % (name, name), text, re.S)
    fields = []
    for decl in body.group(1).split(";"):
        decl = decl.strip()
        if not decl:
            continue
        # "int32_t batch, heads_q" / "const float *alibi_slopes" / "int64_t q_strides[3]"
        first, _, rest = decl.partition(",")
        names = [re.findall(r"(\w+)\s*(?:\[[^\]]*\])?\s*$", first)[0]]
        names += [re.sub(r"\[.*", "", n).strip(" *") for n in rest.split(",") if rest]
        fields += names
    return fields


def load_binding():
    spec = importlib.util.spec_from_file_location("fagen_rt", BINDING)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class PythonAbiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        text = header()
        cls.enums = c_enums(text)
        cls.defines = c_defines(text)
        cls.text = text
        cls.rt = load_binding()

    def check_dict(self, py, enum, prefix):
        """py maps lower-case names to values; enum's enumerators are PREFIX + NAME.upper()."""
        c = {k[len(prefix):].lower(): v for k, v in self.enums[enum].items()}
        self.assertEqual(py, c, f"python/fagen/runtime.py disagrees with fagen.h's {enum}")

    def test_masks(self):
        self.check_dict(self.rt._MASKS, "fagen_mask", "FAGEN_MASK_")

    def test_mask_aligns(self):
        self.check_dict(self.rt._ALIGNS, "fagen_mask_align", "FAGEN_MASK_ALIGN_")

    def test_sparsity(self):
        self.check_dict(self.rt._SPARSITY, "fagen_sparsity", "FAGEN_SPARSITY_")

    def test_score_mods(self):
        self.check_dict(self.rt._SCORE_MODS, "fagen_score_mod", "FAGEN_SCORE_MOD_")

    def test_dtypes(self):
        c = self.enums["fagen_dtype"]
        self.assertEqual(self.rt._DTYPES, {"torch.float16": c["FAGEN_DTYPE_FP16"],
                                           "torch.bfloat16": c["FAGEN_DTYPE_BF16"]})

    def test_status_and_versions(self):
        self.assertEqual(self.rt.FAGEN_OK, self.enums["fagen_status"]["FAGEN_OK"])
        self.assertEqual(self.rt.ABI_VERSION, self.defines["FAGEN_RUNTIME_ABI_VERSION"])
        tag = re.search(r"#define\s+FAGEN_ABI_TAG\s+\((0x[0-9a-fA-F]+)u\s*\|", self.text)
        self.assertEqual(self.rt.ABI_TAG, int(tag.group(1), 16) | self.rt.ABI_VERSION)

    def test_run_arg_bits(self):
        for name in ("ALIBI_SLOPES", "BLOCK_MASK", "CU_SEQLENS", "DROPOUT_SEED"):
            self.assertEqual(getattr(self.rt, "RUN_ARG_" + name),
                             self.defines["FAGEN_RUN_ARG_" + name], name)

    def test_struct_fields(self):
        for py, c in ((self.rt._Problem, "fagen_fwd_problem"), (self.rt.RunArgs, "fagen_run_args"),
                      (self.rt._Plan, "fagen_plan"),
                      (self.rt._MergeProblem, "fagen_merge_problem"),
                      (self.rt._PagedKv, "fagen_paged_kv")):
            names = [n.rstrip("_") for n, _ in py._fields_]
            self.assertEqual(names, c_struct_fields(self.text, c), c)

    def test_parser_sees_a_changed_value(self):
        # The test itself: a value that moved in the header would be seen.
        moved = c_enums(self.text.replace("FAGEN_MASK_WINDOW = 2", "FAGEN_MASK_WINDOW = 3"))
        self.assertEqual(moved["fagen_mask"]["FAGEN_MASK_WINDOW"], 3)


if __name__ == "__main__":
    unittest.main()
