"""docflash: batch processing of long documents on GPUs."""
