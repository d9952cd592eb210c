// local stub: never commit (the real file is written on main)
