if __name__ == "__main__":  # pragma: no cover
    from hermes_store.cli import main

    main()
