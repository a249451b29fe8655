"""What a study shows: :mod:`.view` (the one view of a study every read command prints, computed from the record or
kept by the run that wrote it last), :mod:`.trials` (every trial, as a table) and :mod:`.dashboard` (the HTML page).
Read side: nothing here imports torch or the trial side (the layers contract holds it so).
"""
