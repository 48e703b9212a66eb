"""The storage sub-ports (ARCHITECTURE §4): what each part of the store offers, with its row types. `store/base.py` assembles them into the `Store` port."""
