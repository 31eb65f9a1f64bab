import sys

try:
    from collbench.cli.app import main
except MemoryError:          # a memory limit (ulimit -v) too low for Python to load collbench
    sys.stderr.write("collbench: error: out of memory while starting (a limit such as ulimit -v is too low)\n")
    sys.exit(2)

if __name__ == "__main__":
    main()
