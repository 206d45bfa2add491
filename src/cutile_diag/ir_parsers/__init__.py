"""Stage 2a — typed models of compiler output.

* ``tileir``    — TileIR text as ``tileirdisasm`` prints it (with or without ``-g``)
* ``sass``      — ``cuobjdump -sass`` / ``nvdisasm`` instruction mix
* ``remarks``   — tileiras remarks YAML
* ``resources`` — ``cuobjdump --dump-resource-usage``, ``ptxas -v``, ELF ``.nv.info`` attributes
"""
