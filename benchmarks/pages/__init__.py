"""The generated pages: ``report`` renders docs/quality.md (``quality_page``) and docs/performance.md
(``performance_page``, one section per benchmark in ``performance_sections``) from the results files the benchmarks
wrote, with each figure's log and command (``provenance``), rounded and tabled (``figures``)."""
