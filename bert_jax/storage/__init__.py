"""The file layer: every path a user gives, local or `gs://`, read and written the same way,
with atomic writes, named temporaries and storage errors said in one line."""
