# WMT14 English -> French (§5.1, §6.1), sourced by this directory's scripts.
# shellcheck shell=bash
# shellcheck disable=SC2034  # read by recipes/lib/wmt14.sh
NAME=wmt14_en_fr
SRC=en TGT=fr
VOCAB_SIZE=32000  # §5.1: a 32000 word-piece vocabulary, shared
ARCH_base=vaswani_transformer_base DROPOUT_base=0.1       # Table 2, base
ARCH_big=vaswani_transformer_big_en_fr DROPOUT_big=0.1    # §6.1: the big en-fr model used P_drop = 0.1
# The 36M-sentence training set: europarl-v7, commoncrawl, UN, news-commentary-v9 and 10^9 French-English.
# sha256 sums from tensorflow-datasets' url_checksums/wmt14_translate.txt (europarl, commoncrawl,
# nc-v9) and wmt15_translate.txt (UN 2365634246 bytes, giga-fren 2595102720 bytes).
CORPORA=(
  "http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz 0224c7c710c8a063dfd893b0cc0830202d61f4c75c17eb8e31836103d27d96e7 training/europarl-v7.fr-en.en training/europarl-v7.fr-en.fr"
  "http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz c7a74e2ea01ac6c920123108627e35278d4ccb5701e15428ffa34de86fa3a9e5 commoncrawl.fr-en.en commoncrawl.fr-en.fr"
  "http://www.statmt.org/wmt13/training-parallel-un.tgz 29141b5c1eba149a94f7a59d3b1a834b2e47fe0f8758d68dcd77a3d3f497ee47 un/undoc.2000.fr-en.en un/undoc.2000.fr-en.fr"
  "http://www.statmt.org/wmt14/training-parallel-nc-v9.tgz cb8953f292298e6877ae433c98912b927cb0766b303f4540512ddd286c748485 training/news-commentary-v9.fr-en.en training/news-commentary-v9.fr-en.fr"
  "http://www.statmt.org/wmt10/training-giga-fren.tar 3ff8319f6919393520559bfbc7ad6a747ec81b3abc7be9993b338d4b017b4d9a giga-fren.release2.fixed.en.gz giga-fren.release2.fixed.fr.gz"
)
VALID_SET=wmt13 TEST_SET=wmt14/full  # newstest2013; newstest2014 as in test-full.tgz (3003 sentences)
