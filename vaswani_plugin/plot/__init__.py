"""`vaswani-plot`: attention pictures in the style of the paper's Figures 3-5 and training curves.

- `weights`: every head's attention weights of every layer, read from the model (plain PyTorch);
- `sentence`: one sentence through a checkpoint (sentencepiece, dictionaries, translation);
- `logs`: training and validation records from fairseq-train's json and simple logs;
- `figures`: the drawings (matplotlib, the optional `plots` extra, imported only there);
- `cli`: the command.
"""
