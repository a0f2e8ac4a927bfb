"""The app's logic, no Streamlit: the Step controller, speed, lessons, failure cases, the toy tree,
tree layout, figures and exports. The pages in app_pages/ arrange what this package computes."""
