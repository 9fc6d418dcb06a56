"""Shared pieces of the Streamlit dashboard: session state, the background run manager, charts, helpers.

Pages in ``app_pages/`` are thin scripts: they read state from :mod:`.state`, call
``placement_core`` (numbers) and :mod:`.charts` (figures) and draw. Only this
package and the pages import Streamlit; :mod:`.runs` never calls ``st.*``
because it runs in background threads.
"""

