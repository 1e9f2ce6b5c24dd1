from pipeline.cli import main

# Guarded: a spawned child process (pipeline.fp32_evaluation) imports the parent's main module again.
if __name__ == "__main__":
    raise SystemExit(main())
