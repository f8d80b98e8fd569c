"""Files for other tools: ``gpuscope export`` (tables: :mod:`.tables`)."""
