"""The `docflash` command line (filled in by the service work)."""
import typer

app = typer.Typer(help="docflash: batch processing of long documents on GPUs.")
