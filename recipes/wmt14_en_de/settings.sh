# WMT14 English -> German (§5.1, §6.1), sourced by this directory's scripts.
# shellcheck shell=bash
# shellcheck disable=SC2034  # read by recipes/lib/wmt14.sh
NAME=wmt14_en_de
SRC=en TGT=de
VOCAB_SIZE=37000  # §5.1: a shared source-target vocabulary of about 37000 tokens
ARCH_base=vaswani_transformer_base DROPOUT_base=0.1  # Table 3, base
ARCH_big=vaswani_transformer_big DROPOUT_big=0.3     # Table 3, big
# The ~4.5M-pair standard training set. sha256 sums and sizes from tensorflow-datasets'
# url_checksums/wmt14_translate.txt: europarl-v7 657632379 bytes, commoncrawl 918311367, nc-v9 80418416.
CORPORA=(
  "http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz 0224c7c710c8a063dfd893b0cc0830202d61f4c75c17eb8e31836103d27d96e7 training/europarl-v7.de-en.en training/europarl-v7.de-en.de"
  "http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz c7a74e2ea01ac6c920123108627e35278d4ccb5701e15428ffa34de86fa3a9e5 commoncrawl.de-en.en commoncrawl.de-en.de"
  "http://www.statmt.org/wmt14/training-parallel-nc-v9.tgz cb8953f292298e6877ae433c98912b927cb0766b303f4540512ddd286c748485 training/news-commentary-v9.de-en.en training/news-commentary-v9.de-en.de"
)
# newstest2013 (validation) and newstest2014 as released in test-full.tgz (3003 sentences), the set
# the paper's numbers are on (sacreBLEU's "wmt14" is the 2737-sentence filtered version).
VALID_SET=wmt13 TEST_SET=wmt14/full
