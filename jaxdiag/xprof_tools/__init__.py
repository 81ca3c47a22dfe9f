"""XProf's own converters and server, for what they compute well.

XProf (the ``xprof`` package) turns an XSpace into op statistics with FLOPs and
bytes from the HLO it finds in the trace (``hlo_stats``, ``roofline_model``),
memory over time per allocator (``memory_profile``) and GPU kernel facts
(``kernel_stats``); its server draws the timeline. jaxdiag joins those results
to its own reading of the same trace. Nothing here is imported unless a command
asks for it (``jaxdiag report --deep``, ``jaxdiag open``): XProf's native module
takes longer to load than a small trace takes to read.
"""
