"""fagen.runtime.contiguous_twin: which kernel a paged kernel is checked bit for bit against."""
import unittest

from fagen import runtime

P16 = "fagen_fwd_bf16_hd128_causal_varlen_paged16_sm90ws_m128n128w8s3_r8 (fwd sm_90a bf16 x)"
P128 = "fagen_fwd_bf16_hd128_causal_varlen_paged128_sm90ws_m128n128w8s2_r8 (fwd sm_90a bf16 x)"
TWIN = "fagen_fwd_bf16_hd128_causal_varlen_sm90ws_m128n128w8s2_r8 (fwd sm_90a bf16 x)"


class ContiguousTwin(unittest.TestCase):
    def test_same_tile_up_to_stages(self):
        names = [P128, P16, TWIN]
        self.assertEqual(runtime.contiguous_twin(names, 0), 2)
        self.assertEqual(runtime.contiguous_twin(names, 1), 2)

    def test_other_arch_or_tile_is_no_twin(self):
        other_arch = TWIN.replace("sm_90a", "sm_80")
        other_tile = TWIN.replace("m128n128", "m128n64")
        self.assertIsNone(runtime.contiguous_twin([P16, other_arch], 0))
        self.assertIsNone(runtime.contiguous_twin([P16, other_tile], 0))

    def test_two_candidates_are_no_twin(self):
        s3 = TWIN.replace("w8s2", "w8s3")
        self.assertIsNone(runtime.contiguous_twin([P16, TWIN, s3], 0))
        self.assertEqual(runtime.contiguous_twin([P16, TWIN, s3.replace("sm_90a", "sm_80")], 0), 1)


if __name__ == "__main__":
    unittest.main()
