"""Launchers of the CUDA C++ forward kernels (`csrc/attn_sm90.cuh`, picked by `csrc/attn_sm90.cu`): FlashAttention-3's
structure on sm_90a, for FP8 and for BF16/FP16.

One persistent CTA per SM loops over work tiles (128 or 192 query rows of one sequence and head; causal: one CTA
per work tile, as their lengths differ, or persistent CTAs dealt folds of two tiles of equal total length, `fold`,
for short sequences), or pairs of CTAs on adjacent row blocks share each K/V tile (`cluster`): a producer
warpgroup streams Q and a ring of K/V tiles through TMA; two
(or three) consumer warpgroups of 64 query rows run Q·Kᵀ and P·V on wgmma. The consumer loop (`loop`): "serial"
runs each tile's steps in order; "overlap" issues Q·Kᵀ of tile j before P·V of tile j-1 so that the softmax of
tile j runs while the tensor cores work. FP8 takes the quantized bundle of `quantize_qkv` (128-key K/V quantization
blocks, 64- or 128-row Q blocks, V key-permuted) and reads K/V tiles of one or two blocks (`block_n`); BF16/FP16
take packed Q, K, V as they are. A persistent launch (no causal mask, or folds of sequences of one length) whose last
round would leave CTAs idle splits that round's work tiles along the keys over every CTA and merges the parts in a
second kernel (`split`; splits_tail); so does a causal launch of fewer work tiles than SMs (a few queries over a long
context: a chunked prefill's last chunk, draft tokens), all of its work tiles, and one of up to `split_rounds` rounds
its last round's. Causal attention in a sliding window (`window_left`) runs one CTA per work tile from each work
tile's first window key on (WINDOW_SETTINGS).
"""

import ctypes
import functools

import torch

from . import cuda_build, env
from .gpu import current_stream, sm_count

LOG2E = 1.4426950408889634
KV_BLOCK = 128  # keys per K/V quantization block of the FP8 bundles this kernel reads
WG_ROWS = 64  # query rows per consumer warpgroup: a CTA takes WG_ROWS x consumers rows
FP8_BLOCK_N = (128, 256)  # keys per FP8 K/V tile: one or two quantization blocks (256: d128, two consumers, serial)
HEAD_DIMS = (128, 256)
# The head dims this kernel is built for, FP8 and BF16/FP16: also d64 (csrc/attn_sm90_d64.cu: 128-key tiles, two or
# three consumers, either loop, one CTA per work tile or persistent, causal folds overlapped, split along the keys,
# no pairs or windows; FASTER below).
BUILT_HEAD_DIMS = (64, *HEAD_DIMS)
# head dim -> keys per BF16/FP16 K/V tile, the default first (128 at d128: the overlapped loop only, for lengths that
# leave 176-key tiles a large masked remainder)
BLOCK_N_16BIT = {64: (128,), 128: (176, 128), 256: (80,)}
# Causal attention over at most this many keys per sequence takes SHORT_CAUSAL's settings.
SHORT_CAUSAL_MAX_KEYS = 8192
# (head dim, fp8) -> the settings of short causal attention: persistent CTAs dealt folds (a long and a short row block
# of one head), which overlap each work tile's prologue and epilogue with the next one's loads, where one CTA per
# work tile pays them in full; d128 on three consumers in order, as at other lengths, BF16/FP16 on 128-key tiles
# (4096 keys are 24 tiles of 176, 3.1% of them padding; TWO_CONSUMER_FOLDS below where queries outnumber keys,
# or the keys are few); FP8 d128 (whole folds of their 192-row blocks fill 132 CTAs to 87-89% at S4K and S16K, and
# the fold split fills the last round: session 13, S 4K / 16K / 64K, 3 rounds,
# 690 / 842 / 922 against 649 / 798 / 921 unsplit, two consumers' folds 684 / 810 / 841 and one CTA per work tile
# 657 / 831 / 929). H200, session 11, causal, TFLOPS, medians of 5 interleaved rounds at S 4K / 8K / 16K /
# 64K, folds against one CTA per work tile: BF16 d128 521 / 538 / 606 / 614 against 503 / 531 / 610 / 633
# (128-key tiles; 176-key, the long default: 489 / 526 / 590 / 641); BF16 d256 596 / 610 / 669 / 716 against
# 559 / 601 / 701 / 730; FP8 d128 681 / 748 / 808 / 838 against three consumers' 655 / 729 / 828 / 930 (three
# consumers dealt folds: 650 / - / 788 / 924); FP8 d256 926 / 997 / 1099 / 1148 against 866 / 928 / 1090 / 1166.
# Folds lose at 64K: dealt whole and round-robin, their last round leaves CTAs idle (4096 folds are 31.03 rounds of
# 132), which the hardware's deal of one CTA per work tile, longest first, avoids. BF16/FP16 d128 folds ran on two
# consumers overlapped until session 57 (session 22, H200, S 4K / 8K: 560 / 593 against three consumers' folds 530 /
# 586); since their row blocks end where the sequence does (csrc's fold_lead), three lead: H100, session 57, kernels
# mode, 9 rounds, S1K / 2K / 4K / 8K 432 / 533 / 585 / 622 against 426 / 518 / 577 / 615 (a first run, 5 rounds, at
# 2K-8K: 539 / 581 / 626 against 526 / 580 / 612; `attention-kernels-...-session57-bf16-causal-folds*.json`). d64
# takes folds of its own settings (three consumers overlapped; session 35, kernels mode, B16 S1K / B4 S4K, 32 heads,
# medians of 3 rounds, `attention-kernels-nvidia-h200-2026-12-05-session35-d64-folds.json`): BF16 291 / 405 (two
# consumers' folds at S1K then) against one CTA per work tile's best 237 / 394 (cuDNN 336 / 403); FP8 273 / 484
# against 250 / 447 (cuDNN FP8 293 / 447); at S8K / S16K (`...-session35-d64-8k-16k.json`) level or ahead: BF16 461 /
# 486 against 458 / 485, FP8 534 / 583 against 525 / 577.
SHORT_CAUSAL = {
    (64, False): {"fold": True},
    (64, True): {"fold": True},
    (128, False): {"fold": True},
    (256, False): {"fold": True},
    (128, True): {"fold": True},
    (256, True): {"fold": True},
}
# Folds pair a long and a short row block of one head where a causal mask makes them unequal: where the longest
# sequence's queries are fewer than this share of its keys (a chunked prefill's last chunk, draft tokens), its row
# blocks are about equally long and few, and one CTA per work tile, split along the keys where they are fewer than
# the SMs, takes them instead (when the launch is known). H200, session 30, `benchmarks/few_queries.py` (32 / 8
# heads, d128, one sequence, medians of 3 rounds), TFLOPS, the API's folds against the fastest setting without them:
# 4096 keys, 64 / 512 / 2048 queries, BF16 55 / 357 / 605 against 154 / 552 / 534, FP8 52 / 384 / 627 against 172 /
# 644 / 674; FP8 over 16384 keys (equal lengths), 512 / 2048 / 4096 queries 577 / 835 / 881 against 831 / 839 / 867.
FOLDS_MIN_QUERY_SHARE = 0.25
# Short causal folds of three consumers (FP8 d128's, d64's) take two consumers overlapped instead where the longest
# sequence's queries outnumber its keys: its first rows then see no key. H200, session 34, two consumers' folds
# against three's, 8192 queries over 3072 keys 530 / 313 TFLOPS (547 / 324 at 4 x 16), over 4096 keys (4 x 16) 635 /
# 451 (`few-queries-nvidia-h200-2026-12-05-session34-*.json`). Until session 57 they also did where three consumers'
# 192-row blocks passed the queries by more than 2% of them (d64: 6.25%); since folds' row blocks end where the
# sequence does (csrc's fold_lead), three lead there too. H100, session 57, kernels mode, three consumers' folds
# against two's at S1K / S2K / S4K: FP8 d128 552 / 480, 729 / 646, 810 / 762 (cuDNN FP8 429 / 580 / 737); d64 BF16
# 292 / 282, 380 / 348, 437 / 391 and FP8 319 / 272, 431 / 352, 525 / 416
# (`attention-kernels-nvidia-h100-80gb-hbm3-2026-12-07-session57-end-aligned-*.json`).
TWO_CONSUMER_FOLDS = {"loop": "overlap", "consumers": 2}
# (head dim, fp8) -> the most keys per sequence over which short causal folds take TWO_CONSUMER_FOLDS' two
# consumers too, where three consumers' folds trail theirs (16-bit; FP8's three lead at every length timed, d128 S256
# 199 TFLOPS against 179, d64 124 against 121). H100, session 58, kernels mode, medians of 9 interleaved rounds,
# three consumers' folds against two's at S 256 / 512 / 640 / 768 / 896 / 1K: BF16 d128 146 / 266 / 307 / 350 /
# 396 / 433 against 156 / 284 / 313 / 361 / 392 / 429; d64 109 / 187 / 216 / 252 / 263 / 292 against 131 / 200 /
# 210 / 247 / 255 / 282 (`attention-kernels-nvidia-h100-80gb-hbm3-2026-12-07-session58-short-causal*.json`).
FOLDS_TWO_CONSUMERS_MAX_KEYS = {(64, False): 512, (128, False): 768}
# (head dim, fp8) -> the most keys per sequence for which causal attention over sequences of one length takes
# SHORT_CAUSAL's folds, where that is beyond SHORT_CAUSAL_MAX_KEYS: there the folds split their last round (sequences
# of unequal lengths do not split, and whole folds fill 132 CTAs to 87% at S16K). H200, session 13, FP8 d128 causal,
# 5 interleaved rounds at S16K: three consumers dealt folds 877 against 841 one CTA per work tile (cuDNN FP8 842);
# at S64K they are level (922 against 929, 3 rounds), and BF16 d128 / FP8 d256 folds stay behind or level from 16K.
EQUAL_LENGTHS_FOLDS_MAX_KEYS = {(128, True): 16384}
# Without a causal mask, attention over at most this many keys per sequence takes SHORT_FULL's settings: BF16/FP16
# d128 on two consumers overlapped over 128-key tiles (alone since session 58: PAIRS_MIN_KEYS; timed below in pairs),
# which leave no masked remainder where 176-key ones leave
# up to 3% of their keys past the end and a last tile of the masked softmax. H200, session 16, pairs of CTAs, TFLOPS,
# medians of 5 interleaved rounds, 128-key / 176-key tiles: S1K 487 / 470, 2K 547 / 541 (540 / 530 in a second run),
# 3K 580 / 563, 4K 593 / 581 (582 / 570); from 6K the 176-key tiles lead: 602 / 615 at 6K, 600 / 616 at 8K, 632 / 638
# at 16K. Since session 21 longer ones take three consumers in order on 128-key tiles (FASTER: ahead from 3K, 641
# against 612 in session 22; 6% behind at 2K, where their 192-row blocks leave more rows past the end).
SHORT_FULL_MAX_KEYS = 2048
SHORT_FULL = {(128, False): {"loop": "overlap", "consumers": 2, "block_n": 128}}
# Causal attention beyond the folds runs one CTA per work tile. Where three consumers' tiles (192 rows of one sequence
# and head) would fill fewer than FEW_WAVES[fp8] waves of the SMs (a chunked prefill's short last chunk, a few draft
# tokens over a long context), few_waves_time picks between them and two consumers' 128-row tiles, 1.5x the CTAs,
# paired on the default tiles (FEW_WAVES_SETTINGS); a launch of fewer work tiles than SMs is split along the keys
# (csrc/attn_sm90.cuh's split_parts), so the rows that a CTA computes, not its waves, are what the choice turns on.
# H200, session 25, `benchmarks/few_queries.py` (32 / 8 heads, d128, one sequence, 131072 keys, medians of 3
# rounds), before the split, queries 192 / 512 / 1024 / 2048 / 4096 / 8192 / 16384 (three consumers' waves 0.24 /
# 0.73 / 1.45 / 2.7 / 5.3 / 10.4 / 20.8), TFLOPS, two consumers paired against three: BF16 294 / 642 / 654 / 661 /
# 653 / 655 / 648 against 190 / 454 / 510 / 577 / 631 / 669 / 686; FP8 341 / 859 / 872 / 865 / 874 / 875 / 880
# against 256 / 679 / 686 / 870 / 870 / 915 / 950. Session 26, with the split, the public API at 1 / 64 / 128 / 192 /
# 256 / 384 / 512 / 768 / 1024 queries (three consumers modeled faster at 192, 384 and 768): BF16 5.5 / 329 / 609 /
# 639 / 636 / 657 / 646 / 689 / 647, FP8 6.8 / 432 / 821 / 897 / 855 / 910 / 857 / 949 / 882, each 0.98-1.10x the
# faster of two and three consumers timed beside it, against two consumers unsplit 1.5 / 99 / 197 / 294 / 391 / 537 /
# 635 / 555 / 649 (BF16) and SDPA with a lower-right mask 3.9 / 236 / 283 / 279 / 296 / 300 / 293 / 271 / 339.
FEW_WAVES = {False: 8, True: 2}
FEW_WAVES_SETTINGS = {"loop": "overlap", "consumers": 2}
# (head dim, fp8) -> per-row speed of three consumers (FASTER's) over two overlapped on work tiles whose rows all
# count, causal, one CTA per work tile over long keys: few_waves_time's weight. d128, three in order (H200, session 25,
# 16384 queries over 131072 keys: BF16 686 / 648 TFLOPS, FP8 943 / 880). d64, three overlapped, whose two consumers
# leave a d64 CTA's tensor cores idle much longer (H100, session 36, `few_queries.py --d 64`, 32 / 8 heads over 32K /
# 131K keys, split; the speed that the two settings' measured rates and few_waves_time's rows imply): BF16 1.52-1.66
# from 1 to 512 queries (1.33 at 1024), FP8 1.26-1.32 (1.21-1.26 at 1024).
THREE_CONSUMER_SPEED = {(64, False): 1.55, (64, True): 1.28, (128, False): 1.06, (128, True): 1.06}
# The most rounds of the SMs that a causal launch of one CTA per work tile may fill and still split its last round's
# work tiles along the keys (csrc/attn_sm90.cuh's causal_split), as launches of fewer work tiles than SMs (1 round)
# split all of theirs: 1280 queries of 32 heads in pairs (160 units on 66 pairs, 2.4 rounds) then take 2.5 rounds of
# full work tiles' time, not 3. H200, session 30, `benchmarks/few_queries.py` (32 / 8 heads, d128, one sequence,
# 32768 / 131072 keys, medians of 3 rounds), TFLOPS, split up to 16 rounds against 1: two consumers (paired where
# even) at 640 / 768 / 1280 / 2304 / 3200 queries, BF16 over 131072 keys 648 / 656 / 667 / 661 / 643 against 475 /
# 546 / 598 / 628 / 603, FP8 863 / 867 / 875 / 875 / 861 against 573 / 679 / 760 / 812 / 798; three consumers at
# 3200 queries (4.1 rounds of pairs; 131072 / 32768 keys) BF16 671 / 658 against 598 / 604, FP8 948 / 920 against
# 844 / 845, elsewhere within 4% either way (the repeat noise: the same launch ran 4% apart at 640 queries). With it,
# few_waves_time's choice is the fastest setting timed at each of 384 / 640 / 768 / 1280 / 1536 / 2304 / 3200 queries.
CAUSAL_SPLIT_ROUNDS = 16
# (head dim, fp8, causal) -> CTAs per cluster, where the settings allow pairs (not folds; 16-bit: the overlapped loop
# on the default tiles, or d128's 128-key tiles without a causal mask; FP8: 128-key tiles; both: two consumers
# overlapped or three in order). 2 runs adjacent row blocks as a pair that loads each K/V tile once for both (TMA
# multicast; FlashAttention-3 pairs its 16-bit d >= 128 non-causal CTAs the same way); causal, both take the later
# block's key tiles, the earlier one's mask hiding the keys past its rows.
# H200, TFLOPS, pairs against one CTA. Without a causal mask (session 10, medians of 5 interleaved rounds at S 4K /
# 16K / 64K): BF16 d128 599 / 653 / 664 against 597 / 623 / 638; BF16 d256 667 / 709 / 696 against 685 / 706 / 735
# (80-key tiles in two stages: likely the pair's lockstep, not profiled); FP8 d128 three consumers 839 / 882 / 944
# against 808 / 875 / 927; FP8 d256 1066 / 1169 / 1218 against 1049 / 1137 / 1171. Causal (session 15, medians of 3
# at S 4K / 16K / 64K, one CTA per work tile; below SHORT_CAUSAL_MAX_KEYS folds serve): BF16 d128 474 / 607 / 651
# against 487 / 601 / 628; BF16 d256 539 / 674 / 723 against 556 / 690 / 719; FP8 d128 three consumers 631 / 818 /
# 931 against 655 / 821 / 913; FP8 d256 845 / 1125 / 1179 against 853 / 1095 / 1164; session 22, medians of 5 at
# S 4K / 8K / 16K / 64K: BF16 d128 three consumers 499 / 560 / 625 / 686 against 509 / 572 / 595 / 665.
# So causal attention over at most SHORT_CAUSAL_MAX_KEYS keys per sequence runs alone where it is not in folds (few
# queries: FOLDS_MIN_QUERY_SHARE). Session 31, `benchmarks/few_queries.py`, 4096 keys, medians of 5 rounds, 512 /
# 2048 / 4096 queries, at 32 / 8 heads and at the bench's 4 x 16 heads: one CTA ahead of pairs in all 24 cases, by
# 1.4-21% (two consumers 2.8-8.5%, e.g. BF16 512 queries 545 against 518; three 1.4-21%, FP8 2048 queries 749 against
# 656 at 4 x 16 heads). BF16 d256 pairs only without a causal mask: H100, session 41, kernels mode, medians of 5
# interleaved rounds, S 4K / 8K / 16K / 64K, 8 heads: 672 / 706 / 737 / 741 against one CTA's 662 / 668 / 685 / 723
# (cuDNN 634 / 635 / 669 / 661); causal S 16K / 64K 668 / 742 against 689 / 728. Session 10's loss above predates
# the conditional O rescale and the tail split.
CLUSTER = {
    **{(64, fp8, causal): 1 for fp8 in (False, True) for causal in (False, True)},
    **{(128, fp8, causal): 2 for fp8 in (False, True) for causal in (False, True)},
    (256, False, False): 2,
    (256, False, True): 1,
    (256, True, False): 2,
    (256, True, True): 2,
}
# Pairs take row blocks 2i and 2i+1: where a sequence's queries fill an odd number m of row blocks, its last pair's
# second CTA computes a whole block past the end, 1 / (m + 1) of the work, against the 1-4% that pairs save. Below
# this many blocks an odd count runs alone (cluster_for). H200, session 16, FP8 d128 three consumers without a causal
# mask, 5 rounds: S2K (11 blocks of 192 rows) alone 751 TFLOPS against paired 704; S1K (6 blocks) 618 / 611 and S4K
# (22 blocks) 810 / 813, where no block is wasted.
PAIRS_MIN_ODD_BLOCKS = 32
# (head dim, fp8) -> without a causal mask, over fewer keys per sequence than this, CTAs run alone: a pair's lockstep
# then costs more than its halved K/V loads save. H100, session 58, kernels mode, medians of 7 interleaved rounds,
# alone against paired at S 1K / 1.5K / 2K / 2.5K / 3K / 4K, TFLOPS: BF16 d128 two consumers on 128-key tiles
# (SHORT_FULL) 567 / 585 / 615 / 619 / 626 / 637 against 521 / 561 / 590 / 606 / 610 / 632, three consumers 540 / 626
# / - / - / 653 / 638 against 536 / 613 / - / - / 654 / 652; BF16 d256 613 / 624 / 689 / 682 / 673 / 689 against 591
# / 594 / 669 / 664 / 659 / 684; FP8 d128 three consumers 731 / 872 / 872 / 852 / 904 / 897 against 703 / 848 / 819
# (11 blocks: alone anyway) / 884 / 913 / 899; FP8 d256 944 / 983 / 1121 / 1111 / 1123 / 1169 against 911 / 956 /
# 1107 / 1100 / 1130 / 1186 (`attention-kernels-nvidia-h100-80gb-hbm3-2026-12-07-session58-pairs*.json`). BF16 d256
# pairs from 4K: level there (session 41, H100: 672 against 662), ahead from 8K (706 against 668).
PAIRS_MIN_KEYS = {(128, False): 3072, (256, False): 4096, (128, True): 2560, (256, True): 3072}
LOOPS = {"serial": 0, "overlap": 1}  # csrc/attn_sm90.cuh's Loop
# (head dim, fp8) -> loop (benchmarks/results/attention-kernels-*.json, H200, S16K). With the conditional O rescale
# (session 5) the overlapped loop leads everywhere: BF16 d128 646 / 622 TFLOPS full / causal against serial's
# 563 / 531 (and the ping-pong loop's 617 / 594, since removed), d256 728 / 696 against 625 / 627 (712 / 677);
# FP8 d128 807 / 781 against serial's 706 / 694, d256 1045 / 1020 against 1034 / 995.
LOOP = {(d, fp8): "overlap" for d in BUILT_HEAD_DIMS for fp8 in (False, True)}
# (head dim, fp8, causal) -> this kernel's settings where FA3FP8_KERNEL=auto takes it over the Triton one (same run):
# BF16 +25-35% (d128 646 / 622 against 514 / 504, d256 728 / 696 against 539 / 528), FP8 d256 +15% (1045 / 1020
# against 903 / 889), FP8 d128 non-causal with three consumers in order +14% (838 against 734), causal overlapped
# +4% (781 against 754; three consumers 772). Session 6 (S16K, three runs): FP8 d128 256-key tiles in order, two
# consumers (block_n=256), 846-875 / 763-812 against three consumers' 841-882 / 806-840 and overlap's 828-835 /
# 810-819: level with three consumers, so not a default. Causal FP8 d128 at the 128K prefill's shape (one sequence,
# 32 / 8 heads): three consumers in order 955-970 against overlapped 859-879 (256-key tiles 854-855), so both FP8
# d128 entries take three consumers. BF16/FP16 d128 without a causal mask takes three consumers in order on 128-key
# tiles too (M = 192, 160 registers a thread: three warps a scheduler hide more of each one's softmax chain). H200,
# session 21, kernels mode, pairs, medians of 5 interleaved rounds, S 2K / 4K / 8K / 16K / 64K: three consumers 552 /
# 637 / 656 / 688 / 710 TFLOPS against two overlapped on 128-key tiles 588 / 621 / 647 / 670 / 676 and on 176-key
# ones 570 / 615 / 648 / 655 / 687 (cuDNN 570 / 593 / 615 / 621 / 614); at 2K, 11 blocks of 192 rows leave 6% of
# theirs past the end and two consumers keep it (SHORT_FULL). Causal too, beyond SHORT_CAUSAL's folds (session 22,
# kernels mode, medians of 5 interleaved rounds, S 16K / 64K): three consumers paired 625 / 686 against two
# overlapped on 176-key tiles paired 615 / 658 (alone 602 / 642; cuDNN 552 / 589).
# d64 takes three consumers overlapped (FlashAttention-3's d64 setting). H100 (session 33, kernels mode, S16K, 32
# heads, medians of 3 rounds; `attention-kernels-nvidia-h100-80gb-hbm3-2026-12-05-session33-d64.json`), TFLOPS full /
# causal: BF16 531 / 487 against the Triton kernel's 408 / 382 and cuDNN's 463 / 444 (two consumers overlapped 455 /
# 425, three in order 507 / 478); FP8 667 / 578 against 525 / 511 and cuDNN FP8's 542 / 546.
FASTER = {
    **{(d, fp8, causal): {} for d in HEAD_DIMS for fp8 in (False, True) for causal in (False, True)},
    **{(64, fp8, causal): {"loop": "overlap", "consumers": 3} for fp8 in (False, True) for causal in (False, True)},
    (128, False, False): {"loop": "serial", "consumers": 3, "block_n": 128},
    (128, False, True): {"loop": "serial", "consumers": 3, "block_n": 128},
    (128, True, False): {"loop": "serial", "consumers": 3},
    (128, True, True): {"loop": "serial", "consumers": 3},
}


# (head dim, fp8) -> the settings of causal attention in a sliding window (`window_left`; csrc/attn_sm90.cu's
# window_settings): those of long causal attention (FASTER) alone, one CTA per work tile and unsplit, since a window's
# work tiles are about equally long.
WINDOW_SETTINGS = {
    (128, False): {"loop": "serial", "consumers": 3, "block_n": 128, "cluster": 1, "split": False},
    (256, False): {"loop": "overlap", "consumers": 2, "block_n": BLOCK_N_16BIT[256][0], "cluster": 1, "split": False},
    (128, True): {"loop": "serial", "consumers": 3, "cluster": 1, "split": False},
    (256, True): {"loop": "overlap", "consumers": 2, "cluster": 1, "split": False},
}


# Causal sliding windows run this kernel under FA3FP8_KERNEL=auto as under =cuda: at both head dims it was timed
# ahead of the Triton kernel. H200, `benchmarks/window.py` (one sequence, medians of 3 rounds), TFLOPS of the pairs the
# window keeps, 16384 / 65536 tokens. d128, 32 / 8 heads (session 34, `window-nvidia-h200-2026-12-05-session34.json`):
# window 1024 BF16 435 / 434 against the Triton kernel's 311 / 315, FP8 535 / 557 against 413 / 422; window 4096 BF16
# 563 / 589 against 456 / 456, FP8 804 / 812 against 628 / 630 (FlexAttention BF16 316-408). d256, 16 / 8 heads
# (session 35, `window-nvidia-h200-2026-12-05-session35-d256.json`): window 1024 BF16 464 / 458 against 387 / 390, FP8
# 761 / 768 against 512 / 526; window 4096 BF16 594 / 603 against 504 / 508, FP8 1023 / 1012 against 775 / 782
# (FlexAttention BF16 250-310).
def serves_windows(d: int) -> bool:
    """True when causal attention in a sliding window at head dim `d` runs this kernel, with WINDOW_SETTINGS: at
    its head dims under FA3FP8_KERNEL=auto or cuda, where the library is built or nvcc is there; else the Triton
    kernel serves windows."""
    return env.kernel() != "triton" and d in HEAD_DIMS and cuda_build.available()


def best_settings(d: int, fp8: bool, causal: bool, max_seqlen_k: int | None = None,
                  equal_lengths: bool = False, launch: tuple[int, int, int] | None = None) -> dict | None:
    """This kernel's launcher settings where it measured faster than the Triton kernel (FASTER), else None; causal
    attention over at most SHORT_CAUSAL_MAX_KEYS keys per sequence (with `equal_lengths`, every sequence as long as the
    longest: EQUAL_LENGTHS_FOLDS_MAX_KEYS where that is more) takes SHORT_CAUSAL's instead (three consumers' folds
    TWO_CONSUMER_FOLDS' where the queries outnumber the keys or the keys are at most
    FOLDS_TWO_CONSUMERS_MAX_KEYS), unless `launch` has fewer queries than
    FOLDS_MIN_QUERY_SHARE of the keys; attention without a causal mask over at most SHORT_FULL_MAX_KEYS keys
    SHORT_FULL's. `launch`, where known (else the queries are taken as many as the keys): (sequences x heads, the
    longest sequence's queries, the device's SMs); other causal attention whose three consumers would fill fewer than
    FEW_WAVES[fp8] waves of the SMs takes three consumers or FEW_WAVES_SETTINGS, whichever few_waves_time models
    shorter."""
    settings = FASTER.get((d, fp8, bool(causal)))
    if settings is None or max_seqlen_k is None:
        return settings
    limit = SHORT_CAUSAL_MAX_KEYS
    if equal_lengths:
        limit = max(limit, EQUAL_LENGTHS_FOLDS_MAX_KEYS.get((d, fp8), 0))
    few_queries = launch is not None and launch[1] < FOLDS_MIN_QUERY_SHARE * max_seqlen_k
    short_causal = SHORT_CAUSAL.get((d, fp8))
    if causal and short_causal is not None and max_seqlen_k <= limit and not few_queries:
        folds = {**settings, **short_causal}
        few_keys = max_seqlen_k <= FOLDS_TWO_CONSUMERS_MAX_KEYS.get((d, fp8), 0)
        more_queries = launch is not None and launch[1] > max_seqlen_k
        if folds.get("consumers") == 3 and (few_keys or more_queries):
            folds.update(TWO_CONSUMER_FOLDS)
        return folds
    if not causal and max_seqlen_k <= SHORT_FULL_MAX_KEYS:
        return {**settings, **SHORT_FULL.get((d, fp8), {})}
    few_waves = launch is not None and three_consumer_waves(*launch) < FEW_WAVES[fp8]
    if causal and few_waves and settings.get("consumers") == 3:
        return dict(min((settings, FEW_WAVES_SETTINGS),
                        key=lambda choice: few_waves_time(choice, d, fp8, launch, max_seqlen_k)))
    return settings


def row_blocks(queries: int, block_m: int) -> int:
    """The row blocks of `block_m` rows that `queries` query rows take (the last one may pass their end)."""
    return -(-queries // block_m)


def few_waves_time(settings: dict, d: int, fp8: bool, launch: tuple[int, int, int], max_seqlen_k: int) -> float:
    """Modeled time of a causal launch of one CTA per work tile with these settings, where its work tiles are about
    equally long (a few queries over a long context; `launch` as in best_settings), in query rows that a CTA computes
    over all the keys: a work tile's rows times the rounds of the SMs that the work tiles fill, the last one over the
    parts that the kernel splits its work tiles into where it splits (causal_split, as for sequences of one length;
    splits_tail); three consumers are THREE_CONSUMER_SPEED[(d, fp8)] times as fast per row."""
    sequences_x_heads, max_seqlen_q, sms = launch
    consumers = settings.get("consumers", 2)
    block_m = WG_ROWS * consumers
    block_n = settings.get("block_n") or (FP8_BLOCK_N[0] if fp8 else BLOCK_N_16BIT[d][0])
    loop = settings.get("loop", LOOP[(d, fp8)])
    cluster = cluster_for(d, fp8, loop, consumers, block_n, max_seqlen_q=max_seqlen_q, causal=True,
                          max_seqlen_k=max_seqlen_k)
    m_blocks = row_blocks(max_seqlen_q, block_m * cluster) * cluster
    units, shares = sequences_x_heads * m_blocks // cluster, sms // cluster
    parts = 0
    # without the library no CUDA kernel runs, and any answer serves; kernels that do not split run whole rounds
    if cuda_build.available() and splits_tail(d, fp8):
        parts = cuda_build.load().fa3fp8_causal_split(
            units * cluster, m_blocks, shares, cluster, settings.get("split_rounds", CAUSAL_SPLIT_ROUNDS), block_m,
            block_n, max_seqlen_q, max_seqlen_k, 1, ctypes.byref(ctypes.c_int()))
    rounds = units // shares + 1 / parts if parts else -(-units // shares)
    return block_m * rounds / (THREE_CONSUMER_SPEED[(d, fp8)] if consumers == 3 else 1.0)


def three_consumer_waves(sequences_x_heads: int, max_seqlen_q: int, sms: int) -> float:
    """Waves of `sms` SMs that one CTA per work tile of three consumers (3 x WG_ROWS query rows) fills."""
    return sequences_x_heads * row_blocks(max_seqlen_q, 3 * WG_ROWS) / sms


def cluster_for(d: int, fp8: bool, loop: str, consumers: int, block_n: int, fold: bool = False,
                max_seqlen_q: int | None = None, causal: bool = False, max_seqlen_k: int | None = None) -> int:
    """CTAs per cluster for these launcher settings: CLUSTER[(d, fp8, causal)] where pairs are built (not with `fold`;
    16-bit: the overlapped loop on the head dim's default tiles, d128's 128-key ones without a causal mask, or three
    consumers in order; FP8: 128-key tiles, two consumers overlapped or three in order), else 1; also 1 when the
    longest sequence's queries (`max_seqlen_q`, None: unknown) fill an odd number of CTA row blocks below
    PAIRS_MIN_ODD_BLOCKS, one included: its last pair's second CTA then computes a whole row block past the end; and 1
    over fewer than PAIRS_MIN_KEYS[(d, fp8)] keys per sequence (`max_seqlen_k`, None: unknown), causal attention over
    at most SHORT_CAUSAL_MAX_KEYS."""
    if fp8:
        pairs = block_n == 128 and (consumers == 3 or loop == "overlap")
    else:
        narrow = block_n == 128 and ((not causal and loop == "overlap") or consumers == 3)
        pairs = (loop == "overlap" and block_n == BLOCK_N_16BIT[d][0]) or narrow
    blocks = None if max_seqlen_q is None else row_blocks(max_seqlen_q, WG_ROWS * consumers)
    wasteful = blocks is not None and blocks % 2 == 1 and blocks < PAIRS_MIN_ODD_BLOCKS
    min_keys = SHORT_CAUSAL_MAX_KEYS + 1 if causal else PAIRS_MIN_KEYS.get((d, fp8), 0)
    short = max_seqlen_k is not None and max_seqlen_k < min_keys
    return CLUSTER[(d, fp8, causal)] if pairs and not fold and not wasteful and not short else 1


def serves_fp8(d: int, block_m: int, block_n: int) -> bool:
    """True when FP8 attention on a bundle with these quantization blocks runs this kernel: FA3FP8_KERNEL=cuda, or
    auto where it measured faster both causal and not (FASTER). quantize_qkv then writes V key-permuted."""
    choice = env.kernel()
    if choice == "triton" or (choice == "auto" and any((d, True, c) not in FASTER for c in (False, True))):
        return False
    return supported(d, block_m, block_n)


def supported(d: int, block_m: int, block_n: int) -> bool:
    """True when the FP8 kernel handles this head dim and these quantization blocks (else the Triton kernel runs)."""
    return d in BUILT_HEAD_DIMS and block_n == KV_BLOCK and block_m in (64, 128) and cuda_build.available()


def supported_16bit(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """True when the BF16/FP16 kernel handles these packed tensors: a supported head dim (BUILT_HEAD_DIMS) and
    16-byte-aligned data (what TMA needs)."""
    return (
        q.shape[-1] in BUILT_HEAD_DIMS
        and all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in (q, k, v))
        and cuda_build.available()
    )


def _outputs(q, total_k, batch, out_dtype):
    """Output and LSE buffers; `done` when there is nothing to launch (no queries, or no keys at all: a TMA map needs
    at least one row, and every row then gives zeros with lse = -inf)."""
    total_q, heads, d = q.shape
    out = torch.empty((total_q, heads, d), dtype=out_dtype, device=q.device)
    lse = torch.empty((heads, total_q), dtype=torch.float32, device=q.device)
    if total_q == 0 or batch == 0:
        return out, lse, True
    if total_k == 0:
        out.zero_()
        lse.fill_(float("-inf"))
        return out, lse, True
    return out, lse, False


def splits_tail(d: int, fp8: bool) -> bool:
    """True where the library's kernels at (d, fp8) may split their work along the keys (`split`; csrc/attn_sm90.cuh's
    splits_tail and plan_split): all but BF16/FP16 d256 (its kernel without a causal mask ran 11-13% slower with the
    split's code in it; session 22's split tail in a launch of its own was level: kernels/NOTES.md). H200, session 12,
    TFLOPS, S 4K / 16K / 64K, the split against session 11's kernels, alternating rounds: BF16 d128 pairs 598 / 655 /
    671 against 590 / 643 / 663; FP8 d128 three consumers in pairs 914 against 892 at 16K; FP8 d256 pairs 1201 / 1242
    against 1192 / 1218 at 16K / 64K. d64 (H100, session 36, `benchmarks/kernel_ab.py`, the build with the split
    against the one without): S 4K / 16K without a mask BF16 489 / 520 against 466 / 502, FP8 613 / 668 against 601 /
    652; causal (S 1K / 4K folds, 16K one CTA per work tile) within 1.2% either way."""
    return bool(cuda_build.load().fa3fp8_splits_tail(d, int(fp8)))


def planned_settings(d: int, fp8: bool, causal: bool, max_seqlen_k: int | None = None, equal_lengths: bool = False,
                     launch: tuple[int, int, int] | None = None) -> dict | None:
    """best_settings' answer, worked out once per shape and kernel library: the public API asks on every call, and
    the answer (few_waves_time asks the library twice) took 11-15 us of host time a call on the H100 machine. Read
    it, do not change it; the tables best_settings reads are read once per shape, so change them before a call."""
    library = cuda_build.load() if cuda_build.available() else None
    return _planned_settings(library, d, fp8, causal, max_seqlen_k, equal_lengths, launch)


@functools.lru_cache(maxsize=4096)
def _planned_settings(library, d, fp8, causal, max_seqlen_k, equal_lengths, launch):
    # `library` only keys the cache: benchmarks/kernel_ab.py swaps the library that best_settings asks
    return best_settings(d, fp8, causal, max_seqlen_k, equal_lengths, launch)


def _split_workspace(device, d: int, fp8: bool, block_m: int, fold: bool, split: bool) -> torch.Tensor | None:
    """The workspace where a launch may split its work along the keys (csrc/attn_sm90.cuh, plan_split), as many bytes
    as fa3fp8_split_workspace_bytes gives for the device's SMs. None (a null pointer: never split) for kernels that
    do not split (splits_tail) and when `split` is off."""
    size = _workspace_bytes(cuda_build.load(), sm_count(device), block_m, d, fp8, fold) if split else 0
    return torch.empty(size, dtype=torch.uint8, device=device) if size else None


@functools.lru_cache(maxsize=256)
def _workspace_bytes(library, sms: int, block_m: int, d: int, fp8: bool, fold: bool) -> int:
    """The split workspace's size in bytes, 0 where the library's kernels at (d, fp8) do not split: asked once per
    library and launch shape (two calls into the library)."""
    if not library.fa3fp8_splits_tail(d, int(fp8)):
        return 0
    return library.fa3fp8_split_workspace_bytes(sms, block_m, d, int(fold))


def _pointer_and_size(workspace: torch.Tensor | None) -> tuple[int | None, int]:
    return (None, 0) if workspace is None else (workspace.data_ptr(), workspace.nbytes)


def _check(code: int) -> None:
    if code == 0:
        return
    if code == -1:
        message = "could not make a TMA tensor map (misaligned or too large tensor)"
    elif code == -2:
        message = "unsupported head dim, consumer count, loop, block_n, cluster, fold, split_rounds or window"
    else:
        message = cuda_build.load().fa3fp8_error_string(code).decode()
    raise RuntimeError(f"fa3fp8 CUDA kernel failed: {message}")


def attention_fp8_fwd_sm90(
    q8, k8, v8t, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, softmax_scale, causal,
    q_scale, k_scale, v_scale, cu_blocks_q, cu_blocks_k, q_block, out_dtype, loop=None, consumers=2, block_n=128,
    cluster=None, fold=False, max_seqlen_k=None, split=True, split_rounds=CAUSAL_SPLIT_ROUNDS, window_left=-1,
):
    """Run the FP8 kernel on a packed bundle: q8 (Tq, H, D), k8 (Tk, Hkv, D), v8t (Hkv, D, n_blocks_k * 128) with its
    keys permuted (fp8_layout.permute_v_keys), scales (heads, n_blocks), D one of BUILT_HEAD_DIMS. `loop`: "serial" or
    "overlap" (None: the head dim's default, LOOP); `consumers`: 2 or 3 warpgroups of 64 query rows per CTA (3: d128,
    serial, 128-key tiles; d64, either loop); `block_n`: keys per K/V tile, one of FP8_BLOCK_N; `cluster`: CTAs per
    cluster, 1 or 2 (2: 128-key tiles, two consumers overlapped or three, not with `fold` or at d64; None: cluster_for's
    choice); `fold`: causal attention in persistent CTAs dealt folds (a long and a short row block of one head) instead
    of one CTA per work tile (128-key tiles, two consumers overlapped or three in order; d64: overlapped, two or three;
    see SHORT_CAUSAL); `split`: in a persistent launch (no causal mask, or folds of sequences of one length), let the
    kernel split a last round that would leave CTAs idle along the keys and merge the parts, and in a causal launch of
    one CTA per work tile that fills at most `split_rounds` rounds of the SMs (1: fewer work tiles than SMs) the work
    tiles of its last round; `max_seqlen_k` (None: total keys, an upper bound) sizes those parts and takes part in
    cluster_for's choice; `window_left` >= 0: causal attention in a sliding window of window_left + 1 keys
    (WINDOW_SETTINGS only, unsplit). Returns out (Tq, H, D) in out_dtype and lse (H, Tq) fp32."""
    total_q, heads, d = q8.shape
    total_k, kv_heads, _ = k8.shape
    max_seqlen_k = total_k if max_seqlen_k is None else max_seqlen_k
    loop = LOOP[(d, True)] if loop is None else loop
    if cluster is None:
        cluster = cluster_for(d, True, loop, consumers, block_n, fold, max_seqlen_q, causal, max_seqlen_k)
    batch = cu_seqlens_q.shape[0] - 1
    out, lse, done = _outputs(q8, total_k, batch, out_dtype)
    if done:
        return out, lse
    tensors = (q8, k8, v8t, out, lse, q_scale, k_scale, v_scale, cu_seqlens_q, cu_seqlens_k, cu_blocks_q, cu_blocks_k)
    workspace = _split_workspace(q8.device, d, True, WG_ROWS * consumers, fold, split and window_left < 0)
    _check(cuda_build.load().fa3fp8_attn_fp8_fwd(
        *(t.data_ptr() for t in tensors),
        batch, heads, kv_heads, d, total_q, total_k, v8t.shape[-1], q_scale.shape[-1], k_scale.shape[-1],
        q_block, max_seqlen_q, max_seqlen_k, softmax_scale * LOG2E, int(causal),
        LOOPS[loop], consumers, block_n, int(out_dtype == torch.bfloat16), cluster, int(fold),
        *_pointer_and_size(workspace), split_rounds, window_left,
        current_stream(q8.device),
    ))
    return out, lse


def attention_fwd_sm90(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, softmax_scale, causal, loop=None,
                       consumers=2, block_n=None, cluster=None, fold=False, max_seqlen_k=None, split=True,
                       split_rounds=CAUSAL_SPLIT_ROUNDS, window_left=-1):
    """Run the BF16/FP16 kernel on packed, contiguous q (Tq, H, D), k and v (Tk, Hkv, D) of one dtype, D one of
    BUILT_HEAD_DIMS. `loop`: one of LOOPS (None: the head dim's default, LOOP); `consumers`: 2 or 3 warpgroups of 64
    query rows per CTA (3: d128, serial, 128-key tiles; d64, either loop); `block_n`: keys per K/V tile, one of
    BLOCK_N_16BIT[d] (None: the first; d128's 128 runs the overlapped loop or three consumers); `cluster`: CTAs per
    cluster, 1 or 2 (2: the overlapped loop on the default tiles, d128's 128-key ones overlapped without a causal mask,
    or three consumers; not with `fold` or at d64; None: cluster_for's choice); `fold`: causal attention in persistent
    CTAs dealt folds, as in attention_fp8_fwd_sm90 (two consumers overlapped or three in order; 128-key tiles at d128;
    d64: overlapped, two or three); `split`, `split_rounds`, `max_seqlen_k` and `window_left` as there. Returns out
    (Tq, H, D) in q's dtype and lse (H, Tq) fp32."""
    total_q, heads, d = q.shape
    total_k, kv_heads, _ = k.shape
    max_seqlen_k = total_k if max_seqlen_k is None else max_seqlen_k
    loop = LOOP[(d, False)] if loop is None else loop
    block_n = BLOCK_N_16BIT[d][0] if block_n is None else block_n
    if cluster is None:
        cluster = cluster_for(d, False, loop, consumers, block_n, fold, max_seqlen_q, causal, max_seqlen_k)
    batch = cu_seqlens_q.shape[0] - 1
    out, lse, done = _outputs(q, total_k, batch, q.dtype)
    if done:
        return out, lse
    tensors = (q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k)
    workspace = _split_workspace(q.device, d, False, WG_ROWS * consumers, fold, split and window_left < 0)
    _check(cuda_build.load().fa3fp8_attn_fwd(
        *(t.data_ptr() for t in tensors),
        batch, heads, kv_heads, d, total_q, total_k, max_seqlen_q, max_seqlen_k,
        softmax_scale * LOG2E, int(causal), LOOPS[loop], consumers, block_n, int(q.dtype == torch.bfloat16), cluster,
        int(fold), *_pointer_and_size(workspace), split_rounds, window_left,
        current_stream(q.device),
    ))
    return out, lse
