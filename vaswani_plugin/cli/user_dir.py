"""`vaswani-user-dir`: print the path to give fairseq's --user-dir after `pip install`.

    fairseq-train DATA --user-dir "$(vaswani-user-dir)" --arch vaswani_transformer_base ...
"""
import argparse
import os


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="vaswani-user-dir", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.parse_args(argv)
    # The package directory, found without importing the package (which would import fairseq).
    print(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


if __name__ == "__main__":
    main()
